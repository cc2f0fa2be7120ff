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

// Async mode refuses the sliding window log per call (ErrUnsupported), and
// Reset must too. It used to return nil and claim the key, and from then on
// the node's every round carried a report it could never send, which failed
// the round: the breaker opened and the node went degraded, on every key,
// for as long as it ran. One Reset call took a healthy node off Redis.
func TestResetOfASlidingLogInAsyncIsRefused(t *testing.T) {
	srv := redistest.Start(t)
	nodes := shapeFleet(t, srv, 2, hybrid.Config{Prefix: "rs:"})
	ctx := context.Background()
	swl := hybrid.PerSecond(10).WithAlgorithm(hybrid.SlidingWindowLog)
	other := hybrid.PerSecond(100)

	err := nodes[0].Reset(ctx, "client", swl)
	t.Logf("Reset(sliding window log) in Async: %v", err)
	time.Sleep(2 * time.Second)
	for i, l := range nodes {
		st := l.Stats()
		d, derr := l.Allow(ctx, "unrelated", other)
		require.NoError(t, derr)
		t.Logf("node %d 2 s later: degraded %v, breaker %v, rounds %d, failed %d; a decision on an unrelated key: source %v",
			i, l.Degraded(), st.Breaker, st.Reconcile.Rounds, st.Reconcile.RoundErrors, d.Source)
	}
	assert.ErrorIs(t, err, hybrid.ErrUnsupported, "Reset of an algorithm Async cannot run: a clear error")
	assert.False(t, nodes[0].Degraded(), "Redis is healthy: the node must not be degraded")
	assert.Less(t, nodes[0].Stats().Reconcile.RoundErrors, uint64(5), "Redis is healthy: rounds succeed")
}

// The same with a calendar limit, which Async mode also refuses per call.
func TestResetOfACalendarLimitInAsyncIsRefused(t *testing.T) {
	srv := redistest.Start(t)
	nodes := shapeFleet(t, srv, 2, hybrid.Config{Prefix: "rk:"})
	ctx := context.Background()
	cal := hybrid.PerCalendar(1000, hybrid.Day, "Europe/Paris")
	_, aerr := nodes[0].Allow(ctx, "client", cal)
	err := nodes[0].Reset(ctx, "client", cal)
	t.Logf("Allow(calendar) in Async: %v; Reset(calendar): %v", aerr, err)
	time.Sleep(2 * time.Second)
	st := nodes[0].Stats()
	t.Logf("node 0 2 s later: degraded %v, breaker %v, rounds %d, failed %d, key faults %d", nodes[0].Degraded(), st.Breaker,
		st.Reconcile.Rounds, st.Reconcile.RoundErrors, st.Reconcile.KeyFaults)
	assert.ErrorIs(t, err, hybrid.ErrUnsupported, "Reset of a limit Async cannot run: a clear error")
	assert.False(t, nodes[0].Degraded(), "Redis is healthy: the node must not be degraded")
	assert.Less(t, st.Reconcile.RoundErrors, uint64(5), "Redis is healthy: rounds succeed")
}
