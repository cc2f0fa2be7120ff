package middleware

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// loopbackProxy trusts the test client's connection as a proxy that writes
// X-Forwarded-For, so that a test can play any client address.
var loopbackProxy = httpkey.IPResolver{
	TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
	Header:         httpkey.XForwardedForOnly,
}

// everyLevel is a rules file with a rule at every level, each of
// requests per hour, except the one named tight, of 1 per hour.
func everyLevel(tight string) string {
	n := func(rule string) int {
		if rule == tight {
			return 1
		}
		return 1000
	}
	return fmt.Sprintf(`rate_limits:
  global: {requests: %d, window: 1h}
  per_ip: {requests: %d, window: 1h}
  per_user: {requests: %d, window: 1h}
  tiers:
    free: {requests: %d, window: 1h}
  endpoints:
    /x: {requests: %d, window: 1h}
  default: {requests: %d, window: 1h}
  ban: [192.0.2.0/24]
`, n("global"), n("per_ip"), n("per_user"), n("tier:free"), n("endpoint:/x"), n("default"))
}

// orderConfig is a Config with every request dimension.
func orderConfig(t testing.TB, yaml string, obs observe.Observer) Config {
	lim, _ := manualLimiter(t, epoch)
	return Config{
		Limiter:  lim,
		Rules:    rules.Static(compile(t, yaml)),
		IP:       loopbackProxy,
		Client:   httpkey.First(httpkey.User(userOf), httpkey.IP(loopbackProxy)),
		User:     userOf,
		Tier:     tierOf,
		Priority: priorityOf,
		Observer: obs,
	}
}

var alice = []string{"X-Forwarded-For: 198.51.100.7", "X-User: alice", "X-Tier: free"}

// Ban, then global, per_ip, per_user, tier and endpoint (or default); the
// first check that denies answers and the later ones are not run.
func TestEvaluationOrder(t *testing.T) {
	t.Run("all pass", func(t *testing.T) {
		obs := &recorder{}
		srv := serveWith(t, orderConfig(t, everyLevel(""), obs), authenticate)
		assert.Equal(t, http.StatusOK, get(t, srv, "/x", alice...).Status)
		assert.Equal(t, []string{"global", "per_ip", "per_user", "tier:free", "endpoint:/x"}, obs.checkRules())
		assert.Equal(t, http.StatusOK, get(t, srv, "/elsewhere", alice...).Status)
		assert.Equal(t, []string{"global", "per_ip", "per_user", "tier:free", "default"}, obs.checkRules())
	})
	t.Run("ban first", func(t *testing.T) {
		obs := &recorder{}
		srv := serveWith(t, orderConfig(t, everyLevel(""), obs), authenticate)
		banned := get(t, srv, "/x", "X-Forwarded-For: 192.0.2.7", "X-User: alice", "X-Tier: free")
		assert.Equal(t, http.StatusForbidden, banned.Status)
		assert.Equal(t, `{"error":"forbidden","message":"Requests from this address are forbidden."}`, banned.Body)
		assert.Empty(t, rateHeaders(banned.Header), "no rate-limit fields, no Retry-After: a ban does not end")
		checks, reqs := obs.take()
		assert.Empty(t, checks, "a banned request spends nothing")
		assert.Equal(t, []observe.RequestEvent{{Outcome: observe.Banned, Rule: observe.RuleBan, Client: "user:alice", Latency: reqs[0].Latency}}, reqs)
	})
	for _, tc := range []struct {
		tight, path string
		ran         []string
	}{
		{"global", "/x", []string{"global"}},
		{"per_ip", "/x", []string{"global", "per_ip"}},
		{"per_user", "/x", []string{"global", "per_ip", "per_user"}},
		{"tier:free", "/x", []string{"global", "per_ip", "per_user", "tier:free"}},
		{"endpoint:/x", "/x", []string{"global", "per_ip", "per_user", "tier:free", "endpoint:/x"}},
		{"default", "/elsewhere", []string{"global", "per_ip", "per_user", "tier:free", "default"}},
	} {
		t.Run(tc.tight+" exhausted", func(t *testing.T) {
			obs := &recorder{}
			srv := serveWith(t, orderConfig(t, everyLevel(tc.tight), obs), authenticate)
			require.Equal(t, http.StatusOK, get(t, srv, tc.path, alice...).Status)
			obs.take()
			denied := get(t, srv, tc.path, alice...)
			assert.Equal(t, http.StatusTooManyRequests, denied.Status)
			assert.Equal(t, tc.ran, obs.checkRules(), "the checks after the denying one are not run")
			assert.Equal(t, fmt.Sprintf("%q;r=0;t=3600", tc.tight), denied.Header.Get("RateLimit"))
			assert.Equal(t, "3600", denied.Header.Get("Retry-After"))
		})
	}
}

// A global limit exhausted answers before the endpoint's, which is not
// spent by the requests the global one denies.
func TestGlobalAnswersBeforeEndpoint(t *testing.T) {
	obs := &recorder{}
	lim, clk := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, Rules: rules.Static(compile(t, `rate_limits:
  global: {requests: 3, window: 1h}
  endpoints:
    /x: {requests: 100, window: 100h}
`))})
	assert.Equal(t, repeat(http.StatusOK, 3), statuses(t, srv, "/x", 3))
	obs.take()
	for range 5 {
		denied := get(t, srv, "/x")
		assert.Equal(t, http.StatusTooManyRequests, denied.Status)
		assert.Equal(t, `"global";r=0;t=1200`, denied.Header.Get("RateLimit"))
	}
	assert.Equal(t, repeat("global", 5), obs.checkRules())

	// A global token is back 20 minutes later; the endpoint (one token an
	// hour) has spent 4 of 100 if the denied requests cost it nothing.
	clk.Advance(20 * time.Minute)
	require.Equal(t, http.StatusOK, get(t, srv, "/x").Status)
	checks, _ := obs.take()
	require.Len(t, checks, 2)
	assert.Equal(t, "endpoint:/x", checks[1].Rule)
	assert.Equal(t, int64(96), checks[1].Decision.Remaining)
}

// Shadow rules decide and count, and never block; they never show in the
// headers either.
func TestShadowRule(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, Rules: rules.Static(compile(t, `rate_limits:
  global: {requests: 1000, window: 1h}
  endpoints:
    /x: {requests: 2, window: 1h, shadow: true}
`))})
	for i := range 5 {
		resp := get(t, srv, "/x")
		assert.Equal(t, http.StatusOK, resp.Status)
		assert.Equal(t, `"global";q=1000;w=3600`, resp.Header.Get("RateLimit-Policy"), "the shadow rule is not announced")
		reset := ceilSeconds(time.Duration(i+1) * 3600 * time.Millisecond) // a token every 3.6 s
		assert.Equal(t, fmt.Sprintf(`"global";r=%d;t=%d`, 999-i, reset), resp.Header.Get("RateLimit"))
	}
	checks, reqs := obs.take()
	require.Len(t, checks, 10)
	for i := range 5 {
		c := checks[2*i+1]
		assert.Equal(t, "endpoint:/x", c.Rule)
		assert.True(t, c.Shadow)
		assert.Equal(t, i < 2, c.Decision.Allowed, "the shadow rule decides")
	}
	var outcomes []observe.Outcome
	for _, q := range reqs {
		outcomes = append(outcomes, q.Outcome)
		if q.Outcome == observe.ShadowLimited {
			assert.Equal(t, "endpoint:/x", q.Rule)
		}
	}
	assert.Equal(t, []observe.Outcome{observe.Passed, observe.Passed, observe.ShadowLimited, observe.ShadowLimited, observe.ShadowLimited}, outcomes)
}

// Under global shadow mode nothing blocks: not the limits, not the ban, not
// the penalty.
func TestGlobalShadow(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, IP: loopbackProxy, Rules: rules.Static(compile(t, `rate_limits:
  shadow: true
  default: {requests: 1, window: 1h}
  ban: [192.0.2.0/24]
  penalty: {strikes: 1, within: 60, base: 60, max: 60}
`))})
	banned := get(t, srv, "/", "X-Forwarded-For: 192.0.2.1")
	assert.Equal(t, http.StatusOK, banned.Status)
	assert.Empty(t, rateHeaders(banned.Header))
	assert.Equal(t, "ban", obs.last(t).Rule)

	for range 4 {
		resp := get(t, srv, "/")
		assert.Equal(t, http.StatusOK, resp.Status)
		assert.Empty(t, rateHeaders(resp.Header), "every check is a shadow check: no headers")
	}
	_, reqs := obs.take()
	var got []string
	for _, q := range reqs {
		got = append(got, q.Outcome.String()+" "+q.Rule)
	}
	assert.Equal(t, []string{
		"passed ",
		"shadow_limited default", // a strike: the penalty blocks, in shadow
		"shadow_limited penalty",
		"shadow_limited penalty",
	}, got)
}

// Shadow strikes never reach the live penalty: when shadow mode ends,
// clients start afresh.
func TestShadowPenaltyStaysInShadow(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	const yaml = `rate_limits:
  shadow: %v
  default: {requests: 1, window: 1h}
  penalty: {strikes: 1, within: 60, base: 60, max: 60}
`
	var current atomic.Pointer[rules.Rules]
	current.Store(compile(t, fmt.Sprintf(yaml, true)))
	srv := serve(t, Config{Limiter: lim, Observer: obs, Rules: current.Load})
	assert.Equal(t, repeat(http.StatusOK, 3), statuses(t, srv, "/", 3))
	assert.Equal(t, []observe.Outcome{observe.Passed, observe.ShadowLimited, observe.ShadowLimited}, obs.outcomes())

	current.Store(compile(t, fmt.Sprintf(yaml, false)))
	assert.Equal(t, http.StatusTooManyRequests, get(t, srv, "/").Status, "limited, not blocked by a shadow penalty")
	assert.Equal(t, http.StatusForbidden, get(t, srv, "/").Status, "then the live penalty blocks")
	assert.Equal(t, []observe.Outcome{observe.Limited, observe.Banned}, obs.outcomes())
}

// The priority reserve keeps a fifth of the endpoint's limit for priority
// traffic, end to end.
func TestPriorityReserve(t *testing.T) {
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Priority: priorityOf, Rules: rules.Static(compile(t, `rate_limits:
  endpoints:
    /x: {requests: 10, window: 1h}
  priority: {reserve: 0.2}
`))})
	normal := get(t, srv, "/x")
	assert.Equal(t, "8", normal.Header.Get("X-RateLimit-Limit"), "normal traffic sees its share")
	assert.Equal(t, `"reserve:endpoint:/x";q=8;w=3600, "endpoint:/x";q=10;w=3600`, normal.Header.Get("RateLimit-Policy"))
	assert.Equal(t, repeat(http.StatusOK, 7), statuses(t, srv, "/x", 7))
	denied := get(t, srv, "/x")
	assert.Equal(t, http.StatusTooManyRequests, denied.Status, "normal traffic has used its 8")
	assert.True(t, strings.HasPrefix(denied.Header.Get("RateLimit"), `"reserve:endpoint:/x";r=0;`))

	high := get(t, srv, "/x", "X-Priority: high")
	assert.Equal(t, http.StatusOK, high.Status, "the reserve is left for priority traffic")
	assert.Equal(t, `"endpoint:/x";q=10;w=3600`, high.Header.Get("RateLimit-Policy"))
	assert.Equal(t, "1", high.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, http.StatusOK, get(t, srv, "/x", "X-Priority: high").Status)
	assert.Equal(t, http.StatusTooManyRequests, get(t, srv, "/x", "X-Priority: high").Status, "the whole limit is spent")
	assert.Equal(t, http.StatusTooManyRequests, get(t, srv, "/x").Status)
}
