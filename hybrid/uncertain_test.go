package hybrid

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/faultproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// redisCount sums the window counts (fields c and p) of every hash under
// prefix in srv: what Redis counts for a fixed-window key.
func redisCount(t *testing.T, srv *redistest.Server, prefix string) int64 {
	t.Helper()
	var total int64
	cursor := "0"
	for {
		v, err := srv.Do("SCAN", cursor, "MATCH", prefix+"*", "COUNT", 1000)
		require.NoError(t, err)
		page := v.([]any)
		cursor = page[0].(string)
		for _, k := range page[1].([]any) {
			f, err := srv.Do("HMGET", k, "c", "p")
			require.NoError(t, err)
			for _, x := range f.([]any) {
				if s, ok := x.(string); ok {
					n, err := strconv.ParseInt(s, 10, 64)
					require.NoError(t, err)
					total += n
				}
			}
		}
		if cursor == "0" {
			return total
		}
	}
}

// A Sync decision whose call the breaker abandons at its timeout after Redis
// ran it is decided again in memory, and that spend reported later: Redis
// must count it once, however many decisions on one key time out before a
// report, and however many decisions Redis runs on the key meanwhile.
func TestTimedOutSyncDecisionsCountOnce(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: 2 * time.Second}) // no ContextTimeoutEnabled: the breaker abandons calls at its timeout
	t.Cleanup(func() { _ = c.Close() })
	const prefix = "unc:"
	l, err := New(Config{Redis: c, Prefix: prefix, Mode: Sync, RedisTimeout: 20 * time.Millisecond,
		BreakerFailures: 1 << 30, FleetSize: 1, SyncInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	lim := Per(100_000_000, time.Hour).WithAlgorithm(FixedWindow) // nothing is refused: every decision counts

	// Warm: decisions Redis answers in time.
	for range 20 {
		d, err := l.Allow(bg, "hot", lim)
		require.NoError(t, err)
		require.Equal(t, Remote, d.Source)
	}
	// Every reply now comes 60 ms late: each decision runs in Redis, times
	// out at 20 ms, and is decided again in memory. Reports of that spend
	// go out every 20 ms meanwhile (a round's batch timeout is 250 ms).
	proxy.ReplyLatency(t, 60*time.Millisecond)
	var admitted, degraded atomic.Int64
	admitted.Store(20)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 60 {
				d, err := l.Allow(bg, "hot", lim)
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
				if d.Source == Degraded {
					degraded.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	proxy.Clear()
	time.Sleep(200 * time.Millisecond) // the replies still on the wire arrive
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	require.NoError(t, l.Close(ctx), "everything spent is reported")

	got := redisCount(t, srv, prefix)
	t.Logf("admitted %d (%d decided in memory after a timeout); redis counts %d; reconcile %+v",
		admitted.Load(), degraded.Load(), got, l.Stats().Reconcile)
	require.Greater(t, degraded.Load(), int64(100), "most decisions timed out")
	assert.Equal(t, admitted.Load(), got, "redis counts each admitted decision once")
}
