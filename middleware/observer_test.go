package middleware

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// The observer hears of every check run and of every request, once.
func TestObserver(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, IP: loopbackProxy,
		Client: httpkey.First(httpkey.APIKey(httpkey.APIKeyConfig{}), httpkey.IP(loopbackProxy)),
		Rules: rules.Static(compile(t, `rate_limits:
  global: {requests: 100, window: 1h}
  endpoints:
    /trial: {requests: 1, window: 1h, shadow: true}
  default: {requests: 1, window: 1h}
  ban: [192.0.2.0/24]
`))})
	for _, tc := range []struct {
		path   string
		header []string
		status int
		want   observe.RequestEvent
		checks []string
	}{
		{"/", nil, 200, observe.RequestEvent{Outcome: observe.Passed, Client: "ip:127.0.0.1"}, []string{"global", "default"}},
		{"/", nil, 429, observe.RequestEvent{Outcome: observe.Limited, Rule: "default", Client: "ip:127.0.0.1"}, []string{"global", "default"}},
		{"/trial", nil, 200, observe.RequestEvent{Outcome: observe.Passed, Client: "ip:127.0.0.1"}, []string{"global", "endpoint:/trial"}},
		{"/trial", nil, 200, observe.RequestEvent{Outcome: observe.ShadowLimited, Rule: "endpoint:/trial", Client: "ip:127.0.0.1"}, []string{"global", "endpoint:/trial"}},
		{"/", []string{"X-Forwarded-For: 192.0.2.1"}, 403, observe.RequestEvent{Outcome: observe.Banned, Rule: observe.RuleBan, Client: "ip:192.0.2.1"}, nil},
		{"/", []string{"X-API-Key: " + strings.Repeat("k", 300)}, 400, observe.RequestEvent{Outcome: observe.Failed}, nil},
	} {
		resp := get(t, srv, tc.path, tc.header...)
		require.Equal(t, tc.status, resp.Status, "%s %v", tc.path, tc.header)
		checks, reqs := obs.take()
		require.Len(t, reqs, 1, "one event per request")
		assert.GreaterOrEqual(t, reqs[0].Latency, time.Duration(0))
		reqs[0].Latency = 0
		assert.Equal(t, tc.want, reqs[0])
		var rules []string
		for _, c := range checks {
			rules = append(rules, c.Rule)
			assert.GreaterOrEqual(t, c.Latency, time.Duration(0))
			assert.Equal(t, c.Rule == "endpoint:/trial", c.Shadow)
		}
		assert.Equal(t, tc.checks, rules)
		if len(checks) > 0 && tc.status != 403 {
			// The headers describe the tighter live check, whose decision
			// the observer saw.
			var shown observe.CheckEvent
			for _, c := range checks {
				if !c.Shadow && (shown.Rule == "" || c.Decision.Remaining*shown.Decision.Limit.Capacity() < shown.Decision.Remaining*c.Decision.Limit.Capacity() || !c.Decision.Allowed) {
					shown = c
				}
			}
			assert.Equal(t, strconv.FormatInt(shown.Decision.Remaining, 10), resp.Header.Get("X-RateLimit-Remaining"))
		}
	}
}
