package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// A key contested, then idle until its claim expires, then contested again
// while its shares' hash still lives in Redis. The hash kept the first
// contest's start, records and pool, so the nodes that had not processed the
// new claim were not counted as holding their even splits, and the pool was
// handed to the new claimer, as unspent, while every other node still
// decided in its own fresh even split: 221-222 admitted where R·W + B is 200
// (the fleet does not change). A contest whose records are all older than
// the active window now begins afresh.
func TestAKeyContestedAgainStartsAFreshContest(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.PerSecond(100) // burst 100, refills in 1 s
	nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "rv1:"})
	ctx := context.Background()

	run := func(key string) *fleetsim.Timeline {
		tl, err := fleetsim.Drive(ctx, deciders(nodes), fleetsim.Run{Key: key, Limit: lim, Duration: time.Second},
			fleetsim.Load{Rate: 2000})
		require.NoError(t, err)
		require.NoError(t, tl.FirstError)
		return tl
	}

	// Phase 1: node 0 alone over-uses "stale": it claims it and takes it whole.
	for range 300 {
		_, err := nodes[0].Allow(ctx, "stale", lim)
		require.NoError(t, err)
		time.Sleep(3 * time.Millisecond)
	}
	// Phase 2: idle until the claim has expired everywhere (Lease 1 s +
	// refill 1 s + 4 intervals after its last renewal), with margin.
	time.Sleep(4 * time.Second)
	c := srv.Client(t)
	keys, err := c.Keys(ctx, "rv1:*{stale}*").Result()
	require.NoError(t, err)
	contested, _ := c.HLen(ctx, "rv1:{fleet}:reg").Result()
	t.Logf("before phase 3: shares hash %v still in redis, %d keys in the registry of contested keys", keys, contested)

	// Phase 3: every node at once, the same load, on the stale key and on a
	// key never contested (control).
	stale := run("stale")
	fresh := run("fresh")
	bound := fleetsim.Limit(100, 100, time.Second)
	// A starved scheduler makes the drivers catch up after the second:
	// each run is held to the span its decisions took.
	within := func(tl *fleetsim.Timeline) float64 { return fleetsim.Limit(100, 100, max(tl.Span, time.Second)) + 5 }
	loose := fleetsim.AsyncBound(100, 100, 10*time.Millisecond, 10*time.Millisecond, 4, time.Second)
	t.Logf("re-contested key: admitted %d in 1 s; never-contested control: %d; exact/bound (no fleet change) %.0f; bound with a fleet change %.0f",
		stale.Total().Admitted, fresh.Total().Admitted, bound, loose)
	for b := range stale.Buckets {
		t.Logf("  %v: stale %d fresh %d", time.Duration(b)*stale.Bucket, stale.Fleet()[b].Admitted, fresh.Fleet()[b].Admitted)
	}
	assert.LessOrEqual(t, float64(fresh.Total().Admitted), within(fresh), "control (span %v)", fresh.Span)
	assert.LessOrEqual(t, float64(stale.Total().Admitted), within(stale), "R*W+B: the fleet did not change (span %v)", stale.Span)
}

// The same, when the first contest's claimer has since restarted under the
// same name, long before the window measured: its empty record kept it out of
// the even splits counted while it decided in one (223-235 admitted against
// 200).
func TestAKeyContestedAgainAfterItsClaimerRestarted(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.PerSecond(100) // burst 100, refills in 1 s
	nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "rv2:"})
	ctx := context.Background()
	for range 300 {
		_, err := nodes[0].Allow(ctx, "stale", lim)
		require.NoError(t, err)
		time.Sleep(3 * time.Millisecond)
	}
	// Node 0 restarts: it leaves (its share returns to the pool) and comes
	// back under the same name. The fleet is 4 again long before phase 3.
	require.NoError(t, nodes[0].Close(ctx))
	l, err := hybrid.New(hybrid.Config{Redis: srv.Client(t), Prefix: "rv2:", Node: "n0", SyncInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	nodes[0] = l
	time.Sleep(4 * time.Second)
	for i, n := range nodes {
		require.Equal(t, 4, n.Stats().Reconcile.Nodes, "node %d sees the whole fleet", i)
	}

	run := func(key string) *fleetsim.Timeline {
		tl, err := fleetsim.Drive(ctx, deciders(nodes), fleetsim.Run{Key: key, Limit: lim, Duration: time.Second},
			fleetsim.Load{Rate: 2000})
		require.NoError(t, err)
		require.NoError(t, tl.FirstError)
		return tl
	}
	stale := run("stale")
	fresh := run("fresh")
	bound := fleetsim.Limit(100, 100, time.Second)
	// A starved scheduler makes the drivers catch up after the second:
	// each run is held to the span its decisions took.
	within := func(tl *fleetsim.Timeline) float64 { return fleetsim.Limit(100, 100, max(tl.Span, time.Second)) + 5 }
	loose := fleetsim.AsyncBound(100, 100, 10*time.Millisecond, 10*time.Millisecond, 4, time.Second)
	t.Logf("re-contested key: admitted %d in 1 s; never-contested control: %d; bound (no fleet change) %.0f; bound with a fleet change %.0f",
		stale.Total().Admitted, fresh.Total().Admitted, bound, loose)
	for b := range stale.Buckets {
		t.Logf("  %v: stale %d fresh %d", time.Duration(b)*stale.Bucket, stale.Fleet()[b].Admitted, fresh.Fleet()[b].Admitted)
	}
	assert.LessOrEqual(t, float64(fresh.Total().Admitted), within(fresh), "control (span %v)", fresh.Span)
	assert.LessOrEqual(t, float64(stale.Total().Admitted), within(stale), "R*W+B: the fleet did not change (span %v)", stale.Span)
}
