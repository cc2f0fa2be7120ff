package envoyrls_test

import (
	"context"
	"strconv"
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
