package middleware

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// denials is an OnDenied that records every Denial and answers with a
// plain-text body of its own, under a status of its own per code.
type denials struct {
	mu     sync.Mutex
	seen   []Denial
	status map[string]int
}

func (d *denials) onDenied(w http.ResponseWriter, _ *http.Request, den Denial) {
	d.mu.Lock()
	d.seen = append(d.seen, den)
	status := d.status[den.Code]
	d.mu.Unlock()
	if status == 0 {
		status = den.Status
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "denied by "+den.Rule+" ("+den.Code+")")
}

func (d *denials) last(t testing.TB) Denial {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	require.NotEmpty(t, d.seen)
	return d.seen[len(d.seen)-1]
}

// A service shapes its own answer to each kind of denial: OnDenied gets the
// rule, the client, the check and its decision, with the rate-limit
// headers and Retry-After already set, and writes the status and body.
func TestOnDeniedShapesTheAnswer(t *testing.T) {
	obs := &recorder{}
	lim, clk := manualLimiter(t, epoch)
	dn := &denials{status: map[string]int{CodeRateLimited: http.StatusServiceUnavailable, CodeBanned: http.StatusNotFound}}
	srv := serve(t, Config{Limiter: lim, Observer: obs, IP: loopbackProxy, OnDenied: dn.onDenied, Rules: rules.Static(compile(t, `rate_limits:
  endpoints:
    /search: {requests: 1, window: 60}
  ban: [192.0.2.0/24]
  penalty: {strikes: 2, within: 60, base: 10, max: 3600}
`))})

	assert.Equal(t, http.StatusOK, get(t, srv, "/search").Status)
	clk.Advance(15 * time.Second)
	limited := get(t, srv, "/search")
	assert.Equal(t, http.StatusServiceUnavailable, limited.Status, "the service's own status")
	assert.Equal(t, "denied by endpoint:/search (rate_limit_exceeded)", limited.Body)
	assert.Equal(t, "text/plain", limited.Header.Get("Content-Type"))
	assert.Equal(t, map[string]string{
		"X-RateLimit-Limit":     "1",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "1800000060",
		"RateLimit-Policy":      `"endpoint:/search";q=1;w=60`,
		"RateLimit":             `"endpoint:/search";r=0;t=45`,
		"Retry-After":           "45",
	}, rateHeaders(limited.Header), "the headers are set before OnDenied runs")
	d := dn.last(t)
	assert.Equal(t, observe.Limited, d.Outcome)
	assert.Equal(t, http.StatusTooManyRequests, d.Status, "the default status, which this service overrides")
	assert.Equal(t, CodeRateLimited, d.Code)
	assert.Equal(t, "endpoint:/search", d.Rule)
	assert.Equal(t, "ip:127.0.0.1", d.Client)
	assert.Equal(t, 45*time.Second, d.RetryAfter)
	assert.Equal(t, "endpoint:/search|ip:127.0.0.1", d.Check.Key)
	assert.Equal(t, limit.Per(1, time.Minute), d.Check.Limit)
	assert.False(t, d.Decision.Allowed)
	assert.Equal(t, hybrid.Local, d.Decision.Source)
	assert.Equal(t, 45*time.Second, d.Decision.ResetAfter)

	get(t, srv, "/search") // the second strike
	blocked := get(t, srv, "/search")
	assert.Equal(t, http.StatusForbidden, blocked.Status, "no override for the penalty: the default status")
	assert.Equal(t, "denied by penalty (temporarily_blocked)", blocked.Body)
	assert.Equal(t, map[string]string{"Retry-After": "10"}, rateHeaders(blocked.Header))
	d = dn.last(t)
	assert.Equal(t, Denial{Outcome: observe.Banned, Status: http.StatusForbidden, Code: CodePenalty, Rule: observe.RulePenalty, Client: "ip:127.0.0.1", RetryAfter: 10 * time.Second}, d)

	banned := get(t, srv, "/search", "X-Forwarded-For: 192.0.2.7")
	assert.Equal(t, http.StatusNotFound, banned.Status)
	assert.Equal(t, "denied by ban (forbidden)", banned.Body)
	assert.Empty(t, rateHeaders(banned.Header), "a ban has no Retry-After")
	assert.Equal(t, Denial{Outcome: observe.Banned, Status: http.StatusForbidden, Code: CodeBanned, Rule: observe.RuleBan, Client: "ip:192.0.2.7"}, dn.last(t))

	assert.Equal(t, []observe.Outcome{observe.Passed, observe.Limited, observe.Limited, observe.Banned, observe.Banned}, obs.outcomes(), "the Observer sees the outcomes, whoever answers")
}

// An OnDenied that only adds a header and calls DefaultOnDenied answers
// exactly as the default does.
func TestDefaultOnDeniedIsTheDefault(t *testing.T) {
	const yaml = `rate_limits:
  default: {requests: 1, window: 60}
  ban: [192.0.2.0/24]
  penalty: {strikes: 2, within: 60, base: 10, max: 3600}
`
	lim1, _ := manualLimiter(t, epoch)
	lim2, _ := manualLimiter(t, epoch)
	plain := serve(t, Config{Limiter: lim1, IP: loopbackProxy, Rules: rules.Static(compile(t, yaml))})
	wrapped := serve(t, Config{Limiter: lim2, IP: loopbackProxy, Rules: rules.Static(compile(t, yaml)),
		OnDenied: func(w http.ResponseWriter, r *http.Request, d Denial) {
			w.Header().Set("X-Denied-By", d.Rule)
			DefaultOnDenied(w, r, d)
		}})
	for i, hdr := range [][]string{nil, nil, nil, nil, {"X-Forwarded-For: 192.0.2.7"}} {
		a, b := get(t, plain, "/", hdr...), get(t, wrapped, "/", hdr...)
		assert.Equal(t, a.Status, b.Status, "request %d", i)
		assert.Equal(t, a.Body, b.Body, "request %d", i)
		assert.Equal(t, rateHeaders(a.Header), rateHeaders(b.Header), "request %d", i)
		if a.Status != http.StatusOK {
			assert.NotEmpty(t, b.Header.Get("X-Denied-By"), "request %d", i)
		}
	}
}

// A Denial built by hand, with an unknown code, is answered with its own
// status and code.
func TestDefaultOnDeniedOfAHandMadeDenial(t *testing.T) {
	for _, tc := range []struct {
		d      Denial
		status int
		body   string
		retry  string
	}{
		{Denial{Status: http.StatusTeapot, Code: "brewing", RetryAfter: 1500 * time.Millisecond}, http.StatusTeapot,
			`{"error":"brewing","message":"Request refused. Please retry after 2 seconds.","retry_after":2}`, "2"},
		{Denial{}, http.StatusTooManyRequests,
			`{"error":"rate_limit_exceeded","message":"Request refused. Please retry after 1 second.","retry_after":1}`, "1"},
	} {
		w := httptest.NewRecorder()
		DefaultOnDenied(w, nil, tc.d)
		assert.Equal(t, tc.status, w.Code)
		assert.Equal(t, tc.body, w.Body.String())
		assert.Equal(t, tc.retry, w.Header().Get("Retry-After"))
	}
}

// While a fail-closed limiter is degraded, OnDenied gets an Unavailable
// Denial naming the check that found Redis gone, and may answer otherwise
// than 503.
func TestOnDeniedWhileFailingClosed(t *testing.T) {
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
	dn := &denials{status: map[string]int{CodeUnavailable: http.StatusTooManyRequests}}
	web := serve(t, Config{Limiter: lim, OnDenied: dn.onDenied, Rules: rules.Static(compile(t, `rate_limits:
  default: {requests: 100, window: 1h}
`))})
	assert.Equal(t, http.StatusOK, get(t, web, "/").Status, "Redis up")
	srv.Kill()
	require.Eventually(t, lim.Degraded, 10*time.Second, 5*time.Millisecond, "the breaker opens")

	resp := get(t, web, "/")
	assert.Equal(t, http.StatusTooManyRequests, resp.Status, "the service answers 429 rather than 503")
	assert.Equal(t, "denied by default (service_unavailable)", resp.Body)
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.True(t, retry >= 1 && retry <= 2, "Retry-After %d: when the breaker probes Redis again", retry)
	d := dn.last(t)
	assert.Equal(t, observe.Unavailable, d.Outcome)
	assert.Equal(t, http.StatusServiceUnavailable, d.Status)
	assert.Equal(t, CodeUnavailable, d.Code)
	assert.Equal(t, "default", d.Rule)
	assert.Equal(t, hybrid.Degraded, d.Decision.Source)
	assert.Equal(t, "default|ip:127.0.0.1", d.Check.Key)
}
