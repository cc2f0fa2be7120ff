package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// Even splits are rounded to the nearest 1/32768 of the limit
// (docs/accuracy.md): with 3 nodes, 3 × round(32768/3) = 32769, one part in
// 32768 above the whole. Three nodes, each spending its own even split of an
// uncontested key at once, stay within the capacity plus that documented
// rounding term, B·N/65536 (137 here; 90 measured).
func TestEvenSplitsAddUpToTheLimitWithinTheirRounding(t *testing.T) {
	srv := redistest.Start(t)
	nodes := shapeFleet(t, srv, 3, hybrid.Config{Prefix: "rr:"})
	ctx := context.Background()
	const rate = 3_000_000
	for _, lim := range []hybrid.Limit{
		hybrid.PerHour(rate).WithAlgorithm(hybrid.FixedWindow),
		hybrid.PerHour(rate).WithAlgorithm(hybrid.SlidingWindowCounter),
		hybrid.PerHour(rate), // token bucket, burst 3,000,000
	} {
		total := int64(0)
		for _, l := range nodes {
			// Spend the node's even split in three requests: 1,000,000,
			// then as much as is left in steps that keep it a single
			// uncontested, never-denied key (a denial would claim it).
			for _, n := range []int64{1_000_000, 16, 8, 4, 2, 1} {
				for {
					d, err := l.AllowN(ctx, "big", lim, 0)
					require.NoError(t, err)
					if d.Remaining < n {
						break
					}
					d, err = l.AllowN(ctx, "big", lim, n)
					require.NoError(t, err)
					require.True(t, d.Allowed, "Remaining said it fits")
					total += n
				}
			}
		}
		time.Sleep(0) // nothing refilled meaningfully: 1 request per 1.2 ms
		t.Logf("%v on 3 nodes: admitted %d at once, capacity %d (+%d)", lim, total, int64(rate), total-rate)
		rounding := int64(rate * 3 / 65536)
		assert.LessOrEqual(t, total, int64(rate)+rounding+3, "%v: at most the capacity, the rounding term (and what refills in the test's few ms)", lim)
	}
}
