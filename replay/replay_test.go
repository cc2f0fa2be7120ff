package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/accesslog"
	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/middleware"
	"github.com/hybridlimit/hybridlimit/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 10, 10, 12, 0, 0, 0, time.UTC)

func compile(t testing.TB, yaml string) *rules.Rules {
	t.Helper()
	cfg, err := rules.Parse([]byte(yaml))
	require.NoError(t, err)
	rs, err := rules.Compile(cfg)
	require.NoError(t, err)
	return rs
}

// replayAll replays entries through cfg and returns the report.
func replayAll(t testing.TB, cfg Config, entries []accesslog.Entry) Report {
	t.Helper()
	r, err := New(cfg)
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, r.Add(e))
	}
	rep, err := r.Finish()
	require.NoError(t, err)
	return rep
}

// burst is n requests of client addr, logged within the second at t.
func burst(t time.Time, addr, path string, n int) []accesslog.Entry {
	out := make([]accesslog.Entry, n)
	for i := range out {
		out[i] = accesslog.Entry{Time: t, Resolution: time.Second, Method: "GET", Target: path, RemoteAddr: addr, Status: 200}
	}
	return out
}

// A client over its limit is limited as the middleware limits it, on the
// log's clock: counted per rule and per client, in the minute it happened,
// with the Retry-After it was told; a client within its limit is not.
func TestReplayCountsWhatTheMiddlewareWouldDo(t *testing.T) {
	rs := compile(t, `rate_limits:
  per_ip: {requests: 10, window: 1m}
`)
	var entries []accesslog.Entry
	entries = append(entries, burst(t0, "203.0.113.66", "/", 30)...)
	entries = append(entries, burst(t0.Add(time.Second), "198.51.100.1", "/", 5)...)
	rep := replayAll(t, Config{Rules: []Rules{{Name: "rules.yaml", Rules: rs}}}, entries)
	require.Len(t, rep.Runs, 1)
	run := rep.Runs[0]
	assert.Equal(t, int64(35), rep.Requests)
	assert.Equal(t, Outcomes{Passed: 15, Limited: 20}, run.Outcomes)
	require.Len(t, run.Rules, 1)
	pr := run.Rules[0]
	assert.Equal(t, "per_ip", pr.Rule)
	assert.Equal(t, int64(35), pr.Checked)
	assert.Equal(t, int64(20), pr.Denied)
	assert.Equal(t, int64(20), pr.Limited)
	// Spread over the second: the 11th request comes 1/30 s after the
	// 10th, 6 s before a token; the 30th 5.4 s before one.
	assert.Equal(t, int64(6), pr.RetryAfterMax)
	require.Len(t, run.Clients, 1)
	assert.Equal(t, ClientReport{Client: "ip:203.0.113.66", Requests: 30, Limited: 20, LongestRetryAfter: 6}, run.Clients[0])
	require.NotNil(t, run.FirstMinute)
	assert.Equal(t, t0, run.FirstMinute.Start)
	assert.Equal(t, int64(20), run.WorstMinute.WouldBe429)
	assert.Equal(t, map[string]int64{"per_ip": 20}, run.WorstMinute.ByRule)
}

// Requests logged in one second are spread over it: under a limit of 10 a
// second with a burst of 1, 20 requests in a second pass every other one;
// replayed all at the same instant (Exact), one passes.
func TestReplaySpreadsAnInstantOverItsResolution(t *testing.T) {
	rs := compile(t, `rate_limits:
  per_ip: {requests: 10, window: 1s, burst: 1}
`)
	entries := burst(t0, "203.0.113.7", "/", 20)
	spread := replayAll(t, Config{Rules: []Rules{{Name: "r", Rules: rs}}}, entries)
	assert.Equal(t, int64(10), spread.Runs[0].Outcomes.Passed)
	exact := replayAll(t, Config{Rules: []Rules{{Name: "r", Rules: rs}}, Exact: true}, entries)
	assert.Equal(t, int64(1), exact.Runs[0].Outcomes.Passed)
}

// A shadow rule denies and counts, and the request passes: shadow limited,
// with the Retry-After the client would be told once it is enforced.
func TestReplayShadowRules(t *testing.T) {
	rs := compile(t, `rate_limits:
  per_ip: {requests: 5, window: 1m, shadow: true}
  default: {requests: 100, window: 1m}
`)
	rep := replayAll(t, Config{Rules: []Rules{{Name: "r", Rules: rs}}}, burst(t0, "203.0.113.7", "/", 8))
	run := rep.Runs[0]
	assert.Equal(t, Outcomes{Passed: 5, ShadowLimited: 3}, run.Outcomes)
	assert.Equal(t, "per_ip", run.Rules[0].Rule)
	assert.True(t, run.Rules[0].Shadow)
	assert.Equal(t, int64(3), run.Rules[0].ShadowLimited)
	assert.Positive(t, run.Rules[0].RetryAfterMax)
	assert.Equal(t, int64(8), run.Rules[1].Checked, "the shadow rule's denials let the requests on")
}

// Behind a trusted proxy the client is the forwarded address, as the
// gateway keys it; the proxy's own address is not limited.
func TestReplayKeysClientsAsTheGatewayDoes(t *testing.T) {
	rs := compile(t, `rate_limits:
  per_ip: {requests: 3, window: 1m}
`)
	var entries []accesslog.Entry
	for i := range 12 {
		e := accesslog.Entry{Time: t0.Add(time.Duration(i) * time.Second), Resolution: time.Second, Method: "GET", Target: "/",
			RemoteAddr: "10.0.0.2:443", ForwardedFor: fmt.Sprintf("198.51.100.%d", i%4)}
		entries = append(entries, e)
	}
	ip := httpkey.IPResolver{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Header: httpkey.XForwardedForOnly}
	behind := replayAll(t, Config{Rules: []Rules{{Name: "r", Rules: rs}}, Middleware: middleware.Config{IP: ip, Client: httpkey.IP(ip)}}, entries)
	assert.Equal(t, int64(12), behind.Runs[0].Outcomes.Passed, "four clients of three requests each")
	untrusted := replayAll(t, Config{Rules: []Rules{{Name: "r", Rules: rs}}}, entries)
	assert.Equal(t, int64(3), untrusted.Runs[0].Outcomes.Passed, "one client: the proxy")
}

// A request the keying cannot key (no API key where the keying needs one)
// is not checked, and the report says why.
func TestReplayUncheckedRequests(t *testing.T) {
	rs := compile(t, `rate_limits:
  default: {requests: 3, window: 1m}
`)
	entries := burst(t0, "203.0.113.7", "/", 2)
	entries[1].APIKey = "k1"
	key := httpkey.APIKey(httpkey.APIKeyConfig{Header: "X-API-Key"})
	rep := replayAll(t, Config{Rules: []Rules{{Name: "r", Rules: rs}}, Middleware: middleware.Config{Client: key}}, entries)
	run := rep.Runs[0]
	assert.Equal(t, Outcomes{Passed: 1, Unchecked: 1}, run.Outcomes)
	require.Len(t, run.Unchecked, 1)
	assert.Contains(t, run.Unchecked[0].Reason, "client key")
}

// Two rules files: the requests and clients whose answer changes, both
// ways, with the first of them.
func TestReplayCompare(t *testing.T) {
	before := compile(t, `rate_limits:
  per_ip: {requests: 10, window: 1m}
`)
	after := compile(t, `rate_limits:
  per_ip: {requests: 5, window: 1m}
  ban: [198.51.100.9]
`)
	var entries []accesslog.Entry
	entries = append(entries, burst(t0, "203.0.113.7", "/a", 8)...)
	entries = append(entries, burst(t0.Add(time.Second), "198.51.100.9", "/b", 2)...)
	entries = append(entries, burst(t0.Add(2*time.Second), "203.0.113.8", "/c", 12)...)
	rep := replayAll(t, Config{Rules: []Rules{{Name: "before.yaml", Rules: before}, {Name: "after.yaml", Rules: after}}}, entries)
	require.Len(t, rep.Runs, 2)
	assert.Equal(t, int64(2), rep.Runs[0].Outcomes.Limited)
	assert.Equal(t, int64(3+7), rep.Runs[1].Outcomes.Limited)
	assert.Equal(t, int64(2), rep.Runs[1].Outcomes.Banned)
	c := rep.Changes
	require.NotNil(t, c)
	assert.Equal(t, int64(3+2+5), c.Requests)
	assert.Equal(t, int64(10), c.NewlyRefused)
	assert.Zero(t, c.NewlyAdmitted)
	require.Len(t, c.Clients, 3)
	assert.Equal(t, ClientChange{Client: "ip:203.0.113.8", Requests: 5, NewlyRefused: 5}, c.Clients[0])
	require.NotEmpty(t, c.Examples)
	assert.Equal(t, "passed", c.Examples[0].Before)
	assert.Equal(t, "429 by per_ip", c.Examples[0].After)
	assert.Equal(t, "/a", c.Examples[0].Target)

	var text bytes.Buffer
	require.NoError(t, rep.WriteText(&text))
	assert.Contains(t, text.String(), "== changes from before.yaml to after.yaml")
	assert.Contains(t, text.String(), "10 requests answered differently: 10 newly refused, 0 newly admitted.")
	js, err := json.Marshal(rep)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"newly_refused":10`)
}

// The same log gives the same report, to the byte.
func TestReplayIsDeterministic(t *testing.T) {
	rs := compile(t, `rate_limits:
  per_ip: {requests: 20, window: 10s, burst: 5}
  endpoints:
    /api/*: {requests: 50, window: 1m, algorithm: sliding_window_counter}
  penalty: {strikes: 3, within: 60, base: 10, max: 60}
`)
	var entries []accesslog.Entry
	for s := range 300 {
		for c := range 1 + s%7 {
			entries = append(entries, burst(t0.Add(time.Duration(s)*time.Second), fmt.Sprintf("203.0.113.%d", c), "/api/x", 1+c%3)...)
		}
	}
	var texts []string
	for range 3 {
		var b bytes.Buffer
		require.NoError(t, replayAll(t, Config{Rules: []Rules{{Name: "r", Rules: rs}}}, entries).WriteText(&b))
		texts = append(texts, b.String())
	}
	assert.Equal(t, texts[0], texts[1])
	assert.Equal(t, texts[0], texts[2])
	assert.Contains(t, texts[0], "ban")
}

// What a replay keeps grows with the clients, not with the log: ten times
// the requests from the same clients leave the counts' maps as large, and
// the heap within a bound that ten times the log would pass. (The limiter's
// own memory is bounded by MaxKeys: its records of evicted keys take 32
// bytes per key of MaxKeys once keys come and go, small here.)
func TestReplayMemoryIsBoundedByTheClients(t *testing.T) {
	rs := compile(t, `rate_limits:
  per_ip: {requests: 100, window: 1s}
  endpoints:
    /api/*: {requests: 1000, window: 1m}
`)
	heapAfter := func(seconds int) (uint64, *Replay) {
		r, err := New(Config{Rules: []Rules{{Name: "r", Rules: rs}}, MaxKeys: 1024})
		require.NoError(t, err)
		for s := range seconds {
			for c := range 50 {
				e := accesslog.Entry{Time: t0.Add(time.Duration(s) * time.Second), Resolution: time.Second, Method: "GET",
					Target: "/api/x", RemoteAddr: fmt.Sprintf("203.0.113.%d", c)}
				require.NoError(t, r.Add(e))
			}
		}
		require.NoError(t, r.flush())
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc, r
	}
	small, rs1 := heapAfter(100)   // 5,000 requests
	large, rs2 := heapAfter(1_000) // 50,000 requests
	for _, r := range []*Replay{rs1, rs2} {
		assert.Len(t, r.runs[0].acc.clients, 50)
		assert.Len(t, r.runs[0].acc.rules, 2)
		assert.LessOrEqual(t, r.runs[0].lim.Stats().Keys, 100)
	}
	_, _ = rs1.Finish()
	_, _ = rs2.Finish()
	t.Logf("heap after 5,000 requests %d KiB, after 50,000 %d KiB", small>>10, large>>10)
	assert.Less(t, int64(large)-int64(small), int64(4<<20), "the heap grows with the log")
}

// Entries out of order are replayed at the later time; nothing is lost,
// and Finish twice or Add after it is an error.
func TestReplayOutOfOrderAndMisuse(t *testing.T) {
	rs := compile(t, `rate_limits:
  default: {requests: 100, window: 1m}
`)
	entries := append(burst(t0.Add(time.Second), "203.0.113.7", "/", 2), burst(t0, "203.0.113.7", "/", 2)...)
	r, err := New(Config{Rules: []Rules{{Name: "r", Rules: rs}}})
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, r.Add(e))
	}
	rep, err := r.Finish()
	require.NoError(t, err)
	assert.Equal(t, int64(4), rep.Requests)
	assert.Equal(t, t0.Add(time.Second), rep.From)
	_, err = r.Finish()
	assert.Error(t, err)
	assert.Error(t, r.Add(entries[0]))
	_, err = New(Config{})
	assert.ErrorContains(t, err, "want one, or two")
	empty := replayAll(t, Config{Rules: []Rules{{Name: "r", Rules: rs}}}, nil)
	var b bytes.Buffer
	require.NoError(t, empty.WriteText(&b))
	assert.True(t, strings.HasPrefix(b.String(), "No requests replayed"), b.String())
}
