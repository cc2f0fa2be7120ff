package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// A node alone loses Redis and decides degraded, in the whole limit of the
// fleet it knew. Redis comes back empty while the node's breaker is still
// open, and a second node joins it: Redis counts the newcomer alone, and
// the newcomer decides in the whole limit too. The first node hears the
// join on the fleet's channel and, while degraded, divides by one more
// than the newcomer's count. Before, it went on deciding in the whole limit
// until its breaker closed: the fleet admitted twice the limit meanwhile
// (the simulation's seed 202578, 77 in a second where the bound is 71.6).
func TestADegradedNodeDividesByANodeThatJoinedAfterAnEmptyRestart(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.Per(10, time.Minute) // burst 10; next to nothing refills within the test
	start := func(name string) *hybrid.Limiter {
		c := srv.Client(t, func(o *redis.Options) {
			o.MaxRetries = -1
			o.DialTimeout, o.ReadTimeout = 100*time.Millisecond, 100*time.Millisecond
		})
		l, err := hybrid.New(hybrid.Config{Redis: c, Prefix: "dj:", Node: name, SyncInterval: 20 * time.Millisecond,
			BreakerOpenFor: 30 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l
	}
	burst := func(l *hybrid.Limiter, key string) (admitted int) {
		for range 20 {
			d, err := l.Allow(context.Background(), key, lim)
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
		}
		return admitted
	}
	first := start("a")
	require.Equal(t, 10, burst(first, "warm"), "the node alone, reaching Redis: the whole limit")

	srv.Kill()
	require.Eventually(t, first.Degraded, 10*time.Second, 10*time.Millisecond, "the node's breaker opens")
	require.Equal(t, 10, burst(first, "before"), "degraded and alone in the fleet it knew: the whole limit")
	srv.Restart() // empty
	// The node's subscription to the fleet's channel comes back with Redis
	// (its breaker stays open: nothing else of it reaches Redis).
	direct := srv.Client(t)
	require.Eventually(t, func() bool {
		n, err := direct.PubSubNumSub(context.Background(), "dj:{fleet}:calls").Result()
		return err == nil && n["dj:{fleet}:calls"] > 0
	}, 10*time.Second, 10*time.Millisecond, "the node subscribes again")

	second := start("b")
	require.True(t, first.Degraded(), "the first node's breaker is still open")
	got := 0
	require.Eventually(t, func() bool {
		got = burst(first, fmt.Sprint("after-", time.Now().UnixNano()))
		return got < 10
	}, 5*time.Second, 20*time.Millisecond, "the degraded node divides by the node that joined")
	require.Equal(t, 5, got, "half the limit: one over the joiner's count and itself")
	require.Equal(t, 10, burst(second, "joiner"), "the newcomer, alone in Redis's count, decides in the whole limit")
}
