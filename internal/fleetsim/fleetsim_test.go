package fleetsim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

func TestDriveOffersTheRateAndCounts(t *testing.T) {
	lim, err := hybrid.New(hybrid.Config{})
	require.NoError(t, err)
	defer lim.Close(context.Background())
	nodes := []Decider{lim, lim}
	tl, err := Drive(context.Background(), nodes, Run{Key: "k", Limit: hybrid.PerSecond(100).WithBurst(10), Duration: time.Second},
		Load{Rate: 400, Weight: func(i int, _ time.Duration) float64 { return float64(i + 1) }})
	require.NoError(t, err)
	require.NoError(t, tl.FirstError)
	total := tl.Total()
	// What a starved scheduler takes is measured, not guessed: a driver
	// stops at Duration, so a last turn held up leaves what it owed unsent,
	// and a turn held up beyond the burst's refill time loses that refill.
	assert.LessOrEqual(t, total.Offered, 402, "no more than the rate offered")
	assert.GreaterOrEqual(t, float64(total.Offered), 400*(1-tl.Stalled.Seconds())-2, "the rate offered, but for the last stall (%v)", tl.Stalled)
	assert.LessOrEqual(t, float64(total.Admitted), 10+100*tl.Span.Seconds()+1, "the burst and the refill over the run (%v)", tl.Span)
	assert.GreaterOrEqual(t, float64(total.Admitted), 10+100*(tl.Span-tl.Starved).Seconds()-2,
		"the burst and the refill the drivers were there for (span %v, starved %v)", tl.Span, tl.Starved)
	assert.Equal(t, total.Offered, total.Sources[hybrid.Local])
	perNode := [2]int{}
	for _, b := range tl.Buckets {
		for i, n := range b {
			perNode[i] += n.Offered
		}
	}
	assert.InDelta(t, 2, float64(perNode[1])/float64(perNode[0]), 0.3, "weights split the load")
	worst, _ := tl.MaxWindow(500 * time.Millisecond)
	assert.LessOrEqual(t, worst, total.Admitted)
	assert.Equal(t, total.Admitted, tl.Admitted(0, time.Second))
	assert.Positive(t, tl.Percentile(0.99))
	assert.LessOrEqual(t, tl.Percentile(0.5), tl.Percentile(0.999))
}

func TestDriveRejectsNothingToDo(t *testing.T) {
	_, err := Drive(context.Background(), nil, Run{Duration: time.Second}, Load{Rate: 1})
	assert.Error(t, err)
}

func TestAsyncBound(t *testing.T) {
	// 1000/s, burst 100, 10 ms, rtt 10 ms, 4 nodes, 10 s:
	// 10,000 + 100 + 75 + 1000·0.021/4 + 100·4/65536.
	assert.InDelta(t, 10180.25+400.0/65536, AsyncBound(1000, 100, 10*time.Millisecond, 10*time.Millisecond, 4, 10*time.Second), 1e-6)
	assert.InDelta(t, 10100, AsyncBound(1000, 100, 10*time.Millisecond, 10*time.Millisecond, 1, 10*time.Second), 1e-6, "alone: exact")
	assert.InDelta(t, 10100, Limit(1000, 100, 10*time.Second), 1e-9)
}
