package middleware

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/rules"
)

// A client limited twice within a minute is blocked for 10 s with 403 and
// Retry-After; limited again once free, for 20 s.
func TestPenalty(t *testing.T) {
	obs := &recorder{}
	lim, clk := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, IP: loopbackProxy, Rules: rules.Static(compile(t, `rate_limits:
  default: {requests: 1, window: 1h}
  penalty: {strikes: 2, within: 60, base: 10, max: 3600}
`))})
	assert.Equal(t, []int{200, 429, 429}, statuses(t, srv, "/", 3))

	blocked := get(t, srv, "/")
	assert.Equal(t, http.StatusForbidden, blocked.Status)
	assert.Equal(t, `{"error":"temporarily_blocked","message":"Too many requests were refused; this client is blocked for a while. Please retry after 10 seconds.","retry_after":10}`, blocked.Body)
	assert.Equal(t, map[string]string{"Retry-After": "10"}, rateHeaders(blocked.Header))

	clk.Advance(4500 * time.Millisecond)
	assert.Equal(t, "6", get(t, srv, "/").Header.Get("Retry-After"), "5.5 s left, rounded up")
	assert.Equal(t, http.StatusOK, get(t, srv, "/", "X-Forwarded-For: 198.51.100.1").Status, "another client is not blocked")

	clk.Advance(5500 * time.Millisecond)
	assert.Equal(t, http.StatusTooManyRequests, get(t, srv, "/").Status, "free again, and still over the limit")
	assert.Equal(t, "20", get(t, srv, "/").Header.Get("Retry-After"), "a repeat offence doubles the block")

	_, reqs := obs.take()
	var got []string
	for _, q := range reqs {
		got = append(got, q.Outcome.String()+" "+q.Rule)
	}
	assert.Equal(t, []string{
		"passed ", "limited default", "limited default",
		"banned penalty", "banned penalty", "passed ",
		"limited default", "banned penalty",
	}, got)
}

// A reload that keeps the penalty block keeps the clients' history; one
// that changes it starts afresh.
func TestPenaltyAcrossReloads(t *testing.T) {
	const yaml = `rate_limits:
  default: {requests: 1, window: 1h}
  penalty: {strikes: 1, within: 60, base: 10, max: 3600}
`
	p := penalties{maxClients: 10}
	first := compile(t, yaml)
	pen, err := p.get(first)
	require.NoError(t, err)
	require.NotNil(t, pen)
	again, err := p.get(first)
	require.NoError(t, err)
	assert.Same(t, pen, again)

	same, err := p.get(compile(t, yaml))
	require.NoError(t, err)
	assert.Same(t, pen, same, "the same penalty block: the same Penalty")

	changed, err := p.get(compile(t, yaml+"  priority: {reserve: 0.1}\n"))
	require.NoError(t, err)
	assert.Same(t, pen, changed, "other changes keep it too")

	stricter, err := p.get(compile(t, `rate_limits:
  default: {requests: 1, window: 1h}
  penalty: {strikes: 1, within: 60, base: 20, max: 3600}
`))
	require.NoError(t, err)
	assert.NotSame(t, pen, stricter)
	assert.Equal(t, rules.PenaltyConfig{Strikes: 1, Within: time.Minute, Base: 20 * time.Second, Max: time.Hour}, stricter.Config())

	none, err := p.get(compile(t, "rate_limits:\n  default: {requests: 1, window: 1h}\n"))
	require.NoError(t, err)
	assert.Nil(t, none)
}
