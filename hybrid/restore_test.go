package hybrid

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// A Sync node that has had degraded spend acknowledged spends again while
// Redis is down; Redis comes back empty, and the node's report finds the key
// gone: Redis restores it from the node's estimate, then adds the report's
// spend. The estimate must not hold that spend too. Before, it did, scaled
// up by the node's share (a third here): Redis charged about 500 for about
// 220 requests, and compliant clients were refused after the restart for
// spend that never happened.
func TestSyncDegradedSpendIsChargedOnceAfterAnEmptyRestart(t *testing.T) {
	srv := redistest.Start(t)
	l := newLimiter(t, Config{Redis: client(t, srv), Mode: Sync, FleetSize: 3, RedisTimeout: 50 * time.Millisecond,
		SyncInterval: time.Hour, BreakerOpenFor: 20 * time.Millisecond}) // rounds only when the test runs them
	lim := Per(10_000, 120*time.Hour)
	admitted := 0
	decide := func(want Source) bool {
		d, err := l.Allow(bg, "k", lim)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
		return d.Source == want
	}
	degrade := func(n int) int {
		got := 0
		require.Eventually(t, func() bool {
			if decide(Degraded) {
				got++
			}
			return got >= n
		}, 10*time.Second, time.Millisecond)
		return got
	}
	recover := func() {
		require.Eventually(t, func() bool { return l.reconciler.Round(bg) == nil && !l.Degraded() }, 10*time.Second, 5*time.Millisecond)
		require.Eventually(t, func() bool { return decide(Remote) }, 10*time.Second, time.Millisecond)
	}
	for range 100 {
		require.True(t, decide(Remote))
	}
	// Spend made while Redis is paused, reported and acknowledged.
	srv.Pause()
	degrade(10)
	srv.Resume()
	recover()
	// Spend made while Redis is down, which comes back empty.
	srv.Kill()
	degraded := degrade(100)
	srv.Restart()
	recover()
	require.Positive(t, l.Stats().StateLost, "the report found the state lost and restored it")

	d, err := checker(t, srv.Client(t)).AllowN(bg, "k", lim, 0)
	require.NoError(t, err)
	charged := lim.Capacity() - d.Remaining
	t.Logf("admitted %d, %d of them while Redis was down; Redis charges %d", admitted, degraded, charged)
	assert.LessOrEqual(t, charged, int64(admitted), "no spend charged twice")
	assert.GreaterOrEqual(t, charged, int64(admitted-5), "the spend before the restart is restored")
}
