package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// skewed is the real clock, off by d (its monotonic reading kept).
type skewed struct{ d time.Duration }

func (c skewed) Now() time.Time { return time.Now().Add(c.d) }

// A node whose clock is far from Redis's beats every round in its first
// active window (1 s, on Redis's clock) and quietly after it. (Found in
// review: the window was measured partly on the local clock, so a node 5 s
// ahead beat every interval for 6 s, and one 5 s behind was quiet from its
// first rounds.)
func TestASkewedNodeRestsAfterItsFirstActiveWindow(t *testing.T) {
	srv := redistest.Start(t)
	skews := []time.Duration{0, 5 * time.Second, -5 * time.Second}
	nodes := make([]*hybrid.Limiter, len(skews))
	for i, d := range skews {
		c := hybrid.Config{Prefix: "skew:", SyncInterval: 20 * time.Millisecond, Node: fmt.Sprintf("n%d", i), Clock: skewed{d}}
		c.Redis = srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		l, err := hybrid.New(c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		nodes[i] = l
	}
	rounds := func() []uint64 {
		out := make([]uint64, len(nodes))
		for i, l := range nodes {
			out[i] = l.Stats().Reconcile.Rounds
		}
		return out
	}
	// Its first 400 ms (within the first active window, 1 s): every round.
	r0 := rounds()
	time.Sleep(400 * time.Millisecond)
	r1 := rounds()
	// 1.5 s to 2.5 s after the start: at rest, a beat every 200 ms.
	time.Sleep(1100 * time.Millisecond)
	r2 := rounds()
	time.Sleep(time.Second)
	r3 := rounds()
	for i, d := range skews {
		early, rest := r1[i]-r0[i], r3[i]-r2[i]
		t.Logf("clock %+v: %d rounds in its first 400 ms, %d in a second at rest", d, early, rest)
		// Every 20 ms, 20 rounds; at least 6 on a loaded machine (a clock
		// 5 s behind made 2 before the fix).
		assert.GreaterOrEqual(t, early, uint64(6), "clock %v: rounds in the first active window (every 20 ms)", d)
		assert.LessOrEqual(t, rest, uint64(10), "clock %v: rounds a second at rest (every 200 ms)", d)
	}
}
