package envoyrls_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// The windows' counts survive what Redis does to them: a script cache
// emptied (the counts use no script: nothing fails, nothing counts twice),
// and Redis killed (no call waits on it while the limiter is degraded;
// what was counted meanwhile is sent when it returns). Close sends what is
// left.
func TestCountsSurviveNoScriptAndAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) {
		o.MaxRetries, o.DialTimeout, o.ReadTimeout, o.WriteTimeout = -1, 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	})
	rules := static(t, `
domain: d
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 1000}
`)
	r := startRig(t, rdb, hybrid.Config{BreakerOpenFor: 200 * time.Millisecond, FleetSize: 1},
		envoyrls.Config{Rules: rules, Redis: rdb, Prefix: "c:"})
	ctx := context.Background()
	count := func() string {
		v, err := srv.Do("TIME")
		require.NoError(t, err)
		secs, _ := strconv.ParseInt(v.([]any)[0].(string), 10, 64)
		got, err := srv.Do("GET", "c:d_client_a_"+strconv.FormatInt(secs/86400*86400, 10))
		if err != nil {
			return ""
		}
		s, _ := got.(string)
		return s
	}
	hits := func(n int) {
		for range n {
			resp, err := r.client.ShouldRateLimit(ctx, req("d", 0, "client=a"))
			require.NoError(t, err)
			require.Equal(t, okCode, resp.GetOverallCode())
		}
	}
	hits(3)
	require.Eventually(t, func() bool { return count() == "3" }, 20*time.Second, 5*time.Millisecond, "sent")
	_, err := srv.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	hits(2)
	require.Eventually(t, func() bool { return count() == "5" }, 20*time.Second, 5*time.Millisecond, "sent after SCRIPT FLUSH, once")

	srv.Kill()
	require.Eventually(t, r.lim.Degraded, 20*time.Second, 5*time.Millisecond, "the breaker opens")
	reads := r.svc.CountStats().Reads
	resp, err := r.client.ShouldRateLimit(ctx, req("d", 0, "client=new"))
	require.NoError(t, err)
	assert.Equal(t, okCode, resp.GetOverallCode())
	assert.Equal(t, reads, r.svc.CountStats().Reads, "a key new while Redis is down reads nothing")
	hits(4)
	srv.Restart()
	require.Eventually(t, func() bool { return !r.lim.Degraded() }, 20*time.Second, 5*time.Millisecond, "the breaker closes")
	hits(1)
	// Redis came back empty: what was counted since it died is sent, and
	// the count goes on from there.
	require.Eventually(t, func() bool { return count() == "5" }, 20*time.Second, 5*time.Millisecond, "sent when Redis returned")
	hits(1)
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, r.svc.Close(c))
	assert.Equal(t, "6", count(), "Close sends what is left")
	v, err := srv.Do("TTL", "c:d_client_a_"+strconv.FormatInt(time.Now().Unix()/86400*86400, 10))
	require.NoError(t, err)
	assert.Positive(t, v, "a key made again expires")
}

// countCommands returns the commands srv ran since its stats were last
// reset, by name (INFO commandstats), leaving out the ones a client sends
// to set up a connection and the ones a test sends to read and reset
// them: what is left is what the service sent.
func countCommands(t *testing.T, srv *redistest.Server) map[string]int64 {
	t.Helper()
	v, err := srv.Do("INFO", "commandstats")
	require.NoError(t, err)
	got := map[string]int64{}
	for line := range strings.Lines(v.(string)) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		switch name {
		case "info", "config|resetstat", "hello", "client|setinfo", "ping", "select":
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err, line)
		got[name] = n
	}
	return got
}

// A key called once in its window (a sparse key: one client of many, a
// call a second or less) costs Redis what it costs envoyproxy/ratelimit,
// INCRBY and EXPIRE, and nothing more: the first call sends its hits and
// learns the fleet's count in one round trip, and the flush has nothing
// left to send. The counts live on a Redis of their own here, so every
// command that Redis runs (bar a connection's setup and the test's reading
// of the stats) is the counts', whatever its name or key; and each key
// must hold its one hit with an expiry, so sending nothing cannot pass.
func TestASparseKeyCostsRedisTwoCommands(t *testing.T) {
	const keys = 200
	for _, tc := range []struct {
		name     string
		readWait time.Duration
	}{
		{"answered in time", time.Second},
		// The call goes on without the answer; the answer, when it comes,
		// still counts the hits sent, so the flush does not send them again.
		{"answered late", time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limiterRedis, countRedis := redistest.Start(t), redistest.Start(t)
			r := dayRig(t, limiterRedis, countRedis, tc.readWait)
			ctx := context.Background()
			_, err := countRedis.Do("CONFIG", "RESETSTAT")
			require.NoError(t, err)
			for i := range keys {
				resp, err := r.client.ShouldRateLimit(ctx, req("d", 0, "client=k"+strconv.Itoa(i)))
				require.NoError(t, err)
				require.Equal(t, okCode, resp.GetOverallCode())
			}
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			require.NoError(t, r.svc.Close(c)) // the last flush

			cmds := countCommands(t, countRedis)
			var total int64
			for _, n := range cmds {
				total += n
			}
			assert.LessOrEqual(t, total, int64(2*keys), "commands on the counts' Redis: %v", cmds)

			day := strconv.FormatInt(serverTime(t, countRedis)/86400*86400, 10)
			for i := range keys {
				k := "c:d_client_k" + strconv.Itoa(i) + "_" + day
				v, err := countRedis.Do("GET", k)
				require.NoError(t, err, k)
				require.Equal(t, "1", v, k)
				ttl, err := countRedis.Do("TTL", k)
				require.NoError(t, err)
				require.Positive(t, ttl, "%s expires", k)
			}
		})
	}
}

// A first call's hits, sent with the read of the fleet's count, are counted
// once: in Redis after the flush, and in limit_remaining, whether the
// answer came in time or after the call went on, and whatever other calls
// came while it was on its way.
func TestAFirstCallIsCountedOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		readWait   time.Duration
		calls      int
		hits       uint32
		concurrent bool
	}{
		{"one call", time.Second, 1, 1, false},
		{"one call of 3 hits", time.Second, 1, 3, false},
		{"10 calls", time.Second, 10, 1, false},
		{"10 calls of 2 hits answered late", time.Nanosecond, 10, 2, false},
		{"10 calls at once", time.Second, 10, 1, true},
		{"10 calls at once answered late", time.Nanosecond, 10, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			r := dayRig(t, srv, srv, tc.readWait)
			ctx := context.Background()
			call := func() uint32 {
				resp, err := r.client.ShouldRateLimit(ctx, req("d", tc.hits, "client=a"))
				if !assert.NoError(t, err) {
					return 0
				}
				assert.Equal(t, okCode, resp.GetOverallCode())
				return resp.GetStatuses()[0].GetLimitRemaining()
			}
			if tc.concurrent {
				var wg sync.WaitGroup
				for range tc.calls {
					wg.Go(func() { call() })
				}
				wg.Wait()
			} else {
				for i := range tc.calls {
					remaining := call()
					if i == 0 {
						// Answered in time or not, the call knows its own hits.
						assert.Equal(t, uint32(1000-tc.hits), remaining, "the first call's hits in its limit_remaining, once")
					}
				}
			}
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			require.NoError(t, r.svc.Close(c))
			day := strconv.FormatInt(serverTime(t, srv)/86400*86400, 10)
			v, err := srv.Do("GET", "c:d_client_a_"+day)
			require.NoError(t, err)
			assert.Equal(t, strconv.Itoa(tc.calls*int(tc.hits)), v)
		})
	}
}

// dayRig serves a rule of 1,000 calls a day per client value, the
// limiter on limiterRedis and the windows' counts (prefix "c:") on
// countRedis, a first call waiting readWait for the fleet's count.
func dayRig(t *testing.T, limiterRedis, countRedis *redistest.Server, readWait time.Duration) *rig {
	t.Helper()
	rules := static(t, `
domain: d
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 1000}
`)
	return startRig(t, limiterRedis.Client(t), hybrid.Config{FleetSize: 1},
		envoyrls.Config{Rules: rules, Redis: countRedis.Client(t), Prefix: "c:", CountReadWait: readWait})
}

// serverTime is srv's clock, Unix seconds.
func serverTime(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	v, err := srv.Do("TIME")
	require.NoError(t, err)
	secs, err := strconv.ParseInt(v.([]any)[0].(string), 10, 64)
	require.NoError(t, err)
	return secs
}
