package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/remote"
)

// Every rule kind the gateway can plan, each a sliding window log of an
// hour (exact, and no refill between the gateway's decision and the peek
// after it), a priority reserve (the gateway has no priority traffic, so
// every check has its reserve twin), and a ban.
const explainRules = `rate_limits:
  global: {requests: 10000, window: 1h, algorithm: sliding_window_log}
  per_ip: {requests: 500, window: 1h, algorithm: sliding_window_log}
  endpoints:
    /api/*: {requests: 400, window: 1h, algorithm: sliding_window_log}
    "POST /api/upload": {requests: 300, window: 1h, algorithm: sliding_window_log}
  default: {requests: 200, window: 1h, algorithm: sliding_window_log}
  priority: {reserve: 0.1}
  ban: [203.0.113.0/24]
`

// explainArgs are explain's flags for the request a test sends the gateway:
// its keying flags, then the request's.
func explainArgs(rules, redisAddr string, keyFlags []string, method, path string, headers ...string) []string {
	args := append([]string{"-rules", rules, "-redis", redisAddr, "-remote-addr", "127.0.0.1:40000"}, keyFlags...)
	args = append(args, "-method", method, "-path", path)
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	return args
}

// explain and the gateway plan a request alike: the same requests sent to
// a real gateway (sync mode, behind a trusted proxy, keyed by API key or
// address) and given to explain (by the same flags) name the same checks.
// After each request, explain reads with -redis every check it names as
// spent by exactly the requests that planned it, and Redis holds no state
// of a check explain did not name.
func TestExplainAgreesWithTheGateway(t *testing.T) {
	up := newUpstream(t, nil)
	srv := redistest.Start(t)
	rulesPath := rulesFile(t, explainRules)
	keyFlags := []string{"-trusted-proxies", "127.0.0.1", "-client", "api-key-or-ip"}
	g := startGateway(t, append([]string{"-upstream", up.URL, "-rules", rulesPath, "-redis", srv.Addr(), "-mode", "sync"}, keyFlags...)...)
	rdb := srv.Client(t)

	type sent struct {
		method, path string
		headers      []string
	}
	var reqs []sent
	for i := range 12 {
		s := sent{method: []string{"GET", "POST"}[i%2], path: []string{"/", "/api/items", "/api/upload", "/a//api/./upload"}[i%4]}
		if i%3 != 0 {
			s.headers = append(s.headers, fmt.Sprintf("X-Forwarded-For: 198.51.100.%d, 127.0.0.1", i))
		}
		if i%4 == 1 {
			s.headers = append(s.headers, fmt.Sprintf("X-API-Key: key-%d", i))
		}
		reqs = append(reqs, s)
	}
	reqs = append(reqs, sent{"GET", "/api/items", []string{"X-Forwarded-For: 203.0.113.9"}}) // banned

	spent := map[string]int64{} // "rule key limit" → requests that planned it
	for i, s := range reqs {
		req, err := http.NewRequest(s.method, g.base+s.path, nil)
		require.NoError(t, err)
		for _, h := range s.headers {
			k, v, _ := strings.Cut(h, ": ")
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()

		o, err := parseExplainFlags(explainArgs(rulesPath, srv.Addr(), keyFlags, s.method, s.path, s.headers...), &bytes.Buffer{})
		require.NoError(t, err)
		hreq, err := o.request()
		require.NoError(t, err)
		rs, err := loadRulesFile("explain", o.rulesFile, false, int64(o.maxSize))
		require.NoError(t, err)
		store, err := explainStore(context.Background(), rdb, srv.Addr(), o.prefix)
		require.NoError(t, err)
		ex, err := explainRequest(context.Background(), rs, &o.keying, o.planning(), hreq, store)
		require.NoError(t, err)
		require.NoError(t, ex.planErr)
		if ex.plan.Banned {
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, "request %d: explain says banned", i)
			continue
		}
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
		require.NotEmpty(t, ex.plan.Checks)
		for j, c := range ex.plan.Checks {
			id := c.Rule + " " + c.Key + " " + c.Limit.String()
			spent[id]++
			st := ex.states[j]
			require.NoError(t, st.err)
			assert.Equal(t, c.Limit.Rate-spent[id]-1, st.d.Remaining, "request %d: %s is spent by the %d requests that planned it", i, id, spent[id])
		}
	}
	// Two Redis keys a sliding log state (its set and its total): no state
	// beyond those explain named.
	keys, err := rdb.Keys(context.Background(), "gw:swl:*").Result()
	require.NoError(t, err)
	assert.Len(t, keys, 2*len(spent), "states in Redis: %v", keys)
	assert.Greater(t, len(spent), 10)
}

// explain tells the client's address behind the proxies, its key, the ban
// list, and the checks in order; with -redis each check's state and the
// answer they make.
func TestExplainOutput(t *testing.T) {
	srv := redistest.Start(t)
	path := rulesFile(t, `rate_limits:
  per_ip: {requests: 2, window: 1h}
  endpoints:
    /api/*: {requests: 100, window: 1h, shadow: true}
  penalty: {strikes: 3, within: 60, base: 10, max: 3600}
`)
	var out bytes.Buffer
	args := []string{"explain", "-rules", path, "-trusted-proxies", "10.0.0.0/8", "-remote-addr", "10.0.0.2:443",
		"-H", "X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.0.0.9", "-path", "/api//x"}
	require.NoError(t, run(context.Background(), args, &out))
	text := out.String()
	for _, want := range []string{
		"Request: GET /api//x from 10.0.0.2:443",
		"the rules match its path as /api/x (cleaned)",
		"Client address: 198.51.100.7",
		"RemoteAddr 10.0.0.2:443: a trusted proxy (10.0.0.0/8): its X-Forwarded-For is read, from the right",
		"X-Forwarded-For 10.0.0.9: a trusted proxy (10.0.0.0/8): read on",
		"X-Forwarded-For 198.51.100.7: not a trusted proxy: the client",
		"Client key: ip:198.51.100.7 (-client ip)",
		"Not on the ban list.",
		"Penalty: a client limited 3 times within 1m0s is blocked for 10s",
		"1  per_ip",
		"per_ip|ip:198.51.100.7",
		"endpoint:/api/*|ip:198.51.100.7",
		"shadow",
		"Give -redis ADDR",
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, "6.6.6.6:", "a spoofed entry left of the client is never read")

	// With -redis: fresh, the request passes; once a gateway spent the
	// client's two requests of per_ip, per_ip denies it, and the endpoint
	// rule after it is not reached.
	out.Reset()
	require.NoError(t, run(context.Background(), append(args, "-redis", srv.Addr()), &out))
	assert.Contains(t, out.String(), "admits: 1 left after it")
	assert.Contains(t, out.String(), "Answer now: passes (read from Redis at "+srv.Addr())
	store, err := remote.New(srv.Client(t), remote.Options{Prefix: "gw:"})
	require.NoError(t, err)
	for range 2 {
		_, err := store.AllowN(context.Background(), "per_ip|ip:198.51.100.7", limit.PerHour(2), 1)
		require.NoError(t, err)
	}
	out.Reset()
	require.NoError(t, run(context.Background(), append(args, "-redis", srv.Addr()), &out))
	assert.Contains(t, out.String(), "denies: retry after 30m0s")
	assert.Contains(t, out.String(), "not reached")
	assert.Contains(t, out.String(), "Answer now: 429 by per_ip, Retry-After 1800")
}

// explain's exit statuses are lint's: 0 explained; 1 the rules have
// problems; 2 a rules file that cannot be read, a Redis that cannot be
// reached, or the command used wrongly (no -rules, a bad curl line, both a
// curl line and -path, a bad flag).
func TestExplainExitStatuses(t *testing.T) {
	good := rulesFile(t, threePerHour)
	bad := rulesFile(t, "rate_limits:\n  default: {requests: -1, window: 1h}\n")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		output string // on stdout (code 0) or stderr
	}{
		{"explained", []string{"-rules", good, "-path", "/x"}, 0, "Checks, in the order"},
		{"a curl line, as words", []string{"-rules", good, "curl", "-s", "-X", "POST", "-H", "X-API-Key: k", "http://host/x?y=1"}, 0, "Request: POST /x?y=1"},
		{"a curl line, as one string", []string{"-rules", good, `curl -H 'X-API-Key: k' -d 'a=1' http://host/up`}, 0, "Request: POST /up"},
		{"the rules have problems", []string{"-rules", bad}, 1, "must be positive"},
		{"the rules cannot be read", []string{"-rules", good + ".missing"}, 2, "no such file"},
		{"no -rules", []string{"-path", "/"}, 2, "-rules is required"},
		{"a bad curl line", []string{"-rules", good, "curl", "--frobnicate", "http://h/"}, 2, "not understood"},
		{"a curl line and -path", []string{"-rules", good, "-path", "/", "curl", "http://h/"}, 2, "not both"},
		{"a Redis that cannot be reached", []string{"-rules", good, "-redis", "127.0.0.1:1"}, 2, "Redis at 127.0.0.1:1"},
		{"a bad flag", []string{"-rules", good, "-nope"}, 2, "-nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := asProcess(t, append([]string{"explain"}, tc.args...)...)
			assert.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			if tc.code == 0 {
				assert.Contains(t, stdout, tc.output)
			} else {
				assert.Contains(t, stdout+stderr, tc.output)
			}
		})
	}
}

// A curl line is read as curl reads it: method, URL, headers; quoted as a
// shell quotes.
func TestCurlRequest(t *testing.T) {
	req, err := curlRequest([]string{`curl -sS -X PUT "http://api.example.com/v1/items/7?x=1" -H 'Authorization: Bearer a b' --header="X-Tier: gold" -A 'my agent'`})
	require.NoError(t, err)
	assert.Equal(t, "PUT", req.Method)
	assert.Equal(t, "/v1/items/7?x=1", req.RequestURI)
	assert.Equal(t, "api.example.com", req.Host)
	assert.Equal(t, "Bearer a b", req.Header.Get("Authorization"))
	assert.Equal(t, "gold", req.Header.Get("X-Tier"))
	assert.Equal(t, "my agent", req.Header.Get("User-Agent"))
	req, err = curlRequest([]string{"example.com/x", "-I"})
	require.NoError(t, err)
	assert.Equal(t, "HEAD", req.Method)
	for _, bad := range [][]string{{"curl"}, {"curl", "-H"}, {"curl 'unterminated"}, {"a", "b"}, {"curl", "-H", "nocolon", "http://h/"}} {
		_, err := curlRequest(bad)
		assert.Error(t, err, "%q", bad)
	}
}
