package middleware

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/rules"
)

const planAll = `rate_limits:
  default: {requests: 100000, window: 1h}
  global: {requests: 100000, window: 1h}
  per_ip: {requests: 100000, window: 1h}
  per_user: {requests: 100000, window: 1h, shadow: true}
  endpoints:
    /api/*: {requests: 100000, window: 1h, algorithm: fixed_window}
    "POST /api/upload": {requests: 100000, window: 1h, algorithm: sliding_window_counter}
  tiers:
    gold: {requests: 100000, window: 1h}
  ban: ["203.0.113.0/24"]
  priority: {reserve: 0.25}
`

// The middleware checks exactly what its Planner plans, for requests of
// every kind: from a trusted proxy or not, with a forwarded chain or not,
// with an API key or by address, a user, a tier, priority or not. After
// each, every planned key has spent the request's cost once more, and the
// limiter holds no key the plans did not name.
func TestMiddlewareChecksWhatItsPlannerPlans(t *testing.T) {
	lim, _ := manualLimiter(t, epoch)
	rs := compile(t, planAll)
	ip := httpkey.IPResolver{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Header: httpkey.XForwardedForOnly}
	cfg := Config{
		Limiter: lim,
		Rules:   rules.Static(rs),
		IP:      ip,
		Client:  httpkey.First(httpkey.APIKey(httpkey.APIKeyConfig{Header: "X-Api-Key"}), httpkey.IP(ip)),
		User: func(ctx context.Context) (string, bool) {
			u, ok := ctx.Value(userKey{}).(string)
			return u, ok
		},
		Tier:     func(r *http.Request) string { return r.Header.Get("X-Tier") },
		Priority: func(r *http.Request) bool { return r.Header.Get("X-Priority") != "" },
		Cost:     func(r *http.Request) int64 { return int64(len(r.Header.Get("X-Cost"))) + 1 },
		Logger:   quiet,
	}
	mw, err := New(cfg)
	require.NoError(t, err)
	h := mw(okHandler)
	planner, err := NewPlanner(cfg)
	require.NoError(t, err)

	type state struct {
		key string
		lim limit.Limit
	}
	spent := map[state]int64{}
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	banned := 0
	for i := range 300 {
		req := httptest.NewRequest(pick("GET", "POST"), pick("/", "/api/x", "/api/upload", "/a//api/../api/upload"), nil)
		req.RemoteAddr = pick("10.0.0.1:5000", "198.51.100.7:5000", "[2001:db8::1]:443", "203.0.113.9:1")
		if r.IntN(2) == 0 {
			req.Header.Set("X-Forwarded-For", pick("198.51.100.9", "203.0.113.5, 10.0.0.3", "unknown", "2001:db8:1::7"))
		}
		if r.IntN(2) == 0 {
			req.Header.Set("X-Api-Key", pick("k1", "k2"))
		}
		if r.IntN(2) == 0 {
			req = req.WithContext(context.WithValue(req.Context(), userKey{}, pick("u1", "u2")))
		}
		req.Header.Set("X-Tier", pick("", "gold", "tin"))
		if r.IntN(2) == 0 {
			req.Header.Set("X-Priority", "1")
		}
		req.Header.Set("X-Cost", pick("", "x", "xx"))

		plan, err := planner.Plan(req, rs, nil)
		require.NoError(t, err)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if plan.Banned {
			banned++
			require.Equal(t, http.StatusForbidden, w.Code, "request %d", i)
			continue
		}
		require.Equal(t, http.StatusOK, w.Code, "request %d", i)
		for _, c := range plan.Checks {
			spent[state{c.Key, c.Limit}] += plan.Cost
		}
		for s, n := range spent {
			d, err := lim.PeekN(context.Background(), s.key, s.lim, 0)
			require.NoError(t, err)
			require.Equal(t, s.lim.Capacity()-n, d.Remaining, "request %d: %s", i, s.key)
		}
		require.Equal(t, len(spent), lim.Stats().Keys, "request %d: keys the plans did not name", i)
	}
	assert.Positive(t, banned)
	assert.Greater(t, len(spent), 10, fmt.Sprint(spent))
}
