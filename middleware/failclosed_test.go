package middleware

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// An Async limiter that fails closed answers 503, with Retry-After, while
// its Redis is down; a limiter with another fallback keeps answering.
func TestFailClosedWhileDegraded(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t, func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
		o.MaxRetries = -1
	})
	lim := newLimiter(t, hybrid.Config{
		Redis:          client,
		Fallback:       hybrid.FailClosed,
		SyncInterval:   10 * time.Millisecond,
		BreakerOpenFor: 2 * time.Second,
		Logger:         quiet,
	})
	obs := &recorder{}
	web := serve(t, Config{Limiter: lim, Observer: obs, Rules: rules.Static(compile(t, `rate_limits:
  global: {requests: 1000, window: 1h}
  default: {requests: 100, window: 1h}
`))})

	assert.Equal(t, http.StatusOK, get(t, web, "/").Status, "Redis up")
	srv.Kill()
	require.Eventually(t, lim.Degraded, 10*time.Second, 5*time.Millisecond, "the breaker opens")

	resp := get(t, web, "/")
	require.Equal(t, http.StatusServiceUnavailable, resp.Status)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.True(t, retry >= 1 && retry <= 2, "Retry-After %d: when the breaker probes Redis again", retry)
	unit := "seconds"
	if retry == 1 {
		unit = "second"
	}
	assert.Equal(t, fmt.Sprintf(`{"error":"service_unavailable","message":"Rate limiting is temporarily unavailable. Please retry after %d %s.","retry_after":%d}`, retry, unit, retry), resp.Body)
	assert.Equal(t, map[string]string{"Retry-After": resp.Header.Get("Retry-After")}, rateHeaders(resp.Header),
		"no rate-limit fields: the degraded state says nothing of the limits")

	checks, reqs := obs.take()
	require.NotEmpty(t, reqs)
	last := reqs[len(reqs)-1]
	assert.Equal(t, observe.Unavailable, last.Outcome)
	assert.Equal(t, "global", checks[len(checks)-1].Rule, "the first check answers")
	assert.Equal(t, hybrid.Degraded, checks[len(checks)-1].Decision.Source)
}
