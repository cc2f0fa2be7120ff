package middleware

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

const (
	badRequestBody = `{"error":"bad_request","message":"The request's client key is malformed."}`
	internalBody   = `{"error":"internal_error","message":"The request could not be rate limited."}`
)

// errorsSeen is an OnError that records its errors and then answers as the
// default does.
type errorsSeen struct {
	mu   sync.Mutex
	errs []error
}

func (e *errorsSeen) onError(w http.ResponseWriter, r *http.Request, err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
	DefaultOnError(w, r, err)
}

func (e *errorsSeen) last(t testing.TB) error {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NotEmpty(t, e.errs)
	return e.errs[len(e.errs)-1]
}

// Requests the middleware cannot check go to OnError, never panic, and are
// Failed.
func TestErrors(t *testing.T) {
	const yaml = `rate_limits:
  default: {requests: 10, window: 1h}
`
	for _, tc := range []struct {
		name    string
		cfg     func(*Config)
		header  []string
		status  int
		body    string
		wantErr error  // errors.Is
		msg     string // in err's message
	}{
		{
			name:    "malformed API key",
			cfg:     func(c *Config) { c.Client = httpkey.APIKey(httpkey.APIKeyConfig{}) },
			header:  []string{"X-API-Key: a", "X-API-Key: b"},
			status:  http.StatusBadRequest,
			body:    badRequestBody,
			wantErr: httpkey.ErrMalformed,
			msg:     "middleware: client key: httpkey: malformed key: 2 X-API-Key headers",
		},
		{
			name:    "no key",
			cfg:     func(c *Config) { c.Client = httpkey.APIKey(httpkey.APIKeyConfig{}) },
			status:  http.StatusInternalServerError,
			body:    internalBody,
			wantErr: httpkey.ErrNoKey,
			msg:     "middleware: client key: ",
		},
		{
			name:    "cost above a limit's capacity",
			cfg:     func(c *Config) { c.Cost = func(*http.Request) int64 { return 11 } },
			status:  http.StatusInternalServerError,
			body:    internalBody,
			wantErr: limit.ErrExceedsCapacity,
			msg:     `middleware: check "default": `,
		},
		{
			name:   "negative cost",
			cfg:    func(c *Config) { c.Cost = func(*http.Request) int64 { return -1 } },
			status: http.StatusInternalServerError,
			body:   internalBody,
			msg:    "middleware: negative request cost -1",
		},
		{
			name:    "nil rules",
			cfg:     func(c *Config) { c.Rules = func() *rules.Rules { return nil } },
			status:  http.StatusInternalServerError,
			body:    internalBody,
			wantErr: errNilRules,
			msg:     "middleware: the rules source returned nil",
		},
		{
			name: "key too long for the limiter",
			cfg: func(c *Config) {
				c.Client = func(*http.Request) (string, error) { return strings.Repeat("k", limit.MaxKeyLen), nil }
			},
			status:  http.StatusInternalServerError,
			body:    internalBody,
			wantErr: limit.ErrInvalidKey,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs, seen := &recorder{}, &errorsSeen{}
			lim, _ := manualLimiter(t, epoch)
			cfg := Config{Limiter: lim, Rules: rules.Static(compile(t, yaml)), Observer: obs, OnError: seen.onError}
			tc.cfg(&cfg)
			srv := serve(t, cfg)
			resp := get(t, srv, "/", tc.header...)
			assert.Equal(t, tc.status, resp.Status)
			assert.Equal(t, tc.body, resp.Body)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			assert.Empty(t, rateHeaders(resp.Header))
			err := seen.last(t)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
			}
			assert.True(t, strings.HasPrefix(err.Error(), "middleware: "), err.Error())
			assert.Contains(t, err.Error(), tc.msg)
			assert.Equal(t, observe.Failed, obs.last(t).Outcome)
		})
	}
}

// The default OnError answers the same, and logs.
func TestDefaultOnError(t *testing.T) {
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Rules: rules.Static(compile(t, "rate_limits:\n  default: {requests: 1, window: 1}\n")),
		Client: httpkey.APIKey(httpkey.APIKeyConfig{})})
	assert.Equal(t, response{Status: 500, Body: internalBody}, strip(get(t, srv, "/")))
	assert.Equal(t, response{Status: 400, Body: badRequestBody}, strip(get(t, srv, "/", "X-API-Key: "+strings.Repeat("k", 257))))
	assert.Equal(t, http.StatusOK, get(t, srv, "/", "X-API-Key: abc").Status)
}

// strip drops a response's header.
func strip(r response) response { r.Header = nil; return r }

// A server on a Unix socket has no client address: the request fails
// rather than skip the ban list.
func TestNoClientAddress(t *testing.T) {
	seen := &errorsSeen{}
	lim, _ := manualLimiter(t, epoch)
	mw, err := New(Config{Limiter: lim, OnError: seen.onError, Client: httpkey.APIKey(httpkey.APIKeyConfig{}),
		Rules: rules.Static(compile(t, "rate_limits:\n  default: {requests: 1, window: 1}\n"))})
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(mw(okHandler))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	resp := do(t, &http.Client{Transport: tr}, "http://unix/", "X-API-Key: abc")
	assert.Equal(t, http.StatusInternalServerError, resp.Status)
	assert.ErrorContains(t, seen.last(t), "middleware: client address: httpkey: RemoteAddr")
}

// Disabled rules check nothing, not even the client key.
func TestDisabledRules(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, Client: httpkey.APIKey(httpkey.APIKeyConfig{}), Rules: rules.Static(compile(t, `rate_limits:
  enabled: false
  default: {requests: 1, window: 1h}
`))})
	assert.Equal(t, repeat(http.StatusOK, 3), statuses(t, srv, "/", 3))
	assert.Equal(t, repeat(observe.Passed, 3), obs.outcomes())
}

// A shadow check that errs is skipped: shadow checks never block.
func TestShadowCheckError(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, Cost: func(*http.Request) int64 { return 5 }, Rules: rules.Static(compile(t, `rate_limits:
  global: {requests: 2, window: 1h, shadow: true}
  default: {requests: 100, window: 1h}
`))})
	resp := get(t, srv, "/")
	assert.Equal(t, http.StatusOK, resp.Status)
	assert.Equal(t, "95", resp.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, []string{"default"}, obs.checkRules())
}

// A request of cost 0 spends nothing and passes, with the headers.
func TestZeroCost(t *testing.T) {
	lim, _ := manualLimiter(t, epoch)
	free := func(r *http.Request) int64 {
		if r.Method == http.MethodGet && r.URL.Path == "/health" {
			return 0
		}
		return 1
	}
	srv := serve(t, Config{Limiter: lim, Cost: free, Rules: rules.Static(compile(t, "rate_limits:\n  default: {requests: 1, window: 1h}\n"))})
	assert.Equal(t, []int{200, 429}, statuses(t, srv, "/", 2))
	health := get(t, srv, "/health")
	assert.Equal(t, http.StatusOK, health.Status)
	assert.Equal(t, "0", health.Header.Get("X-RateLimit-Remaining"))
}

// The path is cleaned before matching: a doubled slash or a dot segment
// does not sidestep an endpoint's rule.
func TestPathCleaned(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, Rules: rules.Static(compile(t, `rate_limits:
  endpoints:
    /api/v1/search: {requests: 2, window: 1h}
  default: {requests: 100, window: 1h}
`))})
	for _, p := range []string{"/api/v1/search", "/api//v1/search", "/api/v1/./search/", "/api/x/../v1/search"} {
		get(t, srv, p)
	}
	checks, reqs := obs.take()
	require.Len(t, checks, 4)
	for _, c := range checks {
		assert.Equal(t, "endpoint:/api/v1/search", c.Rule)
	}
	require.Len(t, reqs, 4)
	assert.Equal(t, observe.Limited, reqs[3].Outcome, "the fourth path is the same endpoint, over its limit")
}

func TestNewRefusesBadConfig(t *testing.T) {
	lim, _ := manualLimiter(t, epoch)
	src := rules.Static(compile(t, "rate_limits: {}\n"))
	for _, tc := range []struct {
		name string
		cfg  Config
		msg  string
	}{
		{"no limiter", Config{Rules: src}, "middleware: Config.Limiter is nil"},
		{"no rules", Config{Limiter: lim}, "middleware: Config.Rules is nil"},
		{"bad resolver", Config{Limiter: lim, Rules: src, IP: httpkey.IPResolver{IPv6Prefix: 129}}, "middleware: Config.IP: httpkey: IPResolver.IPv6Prefix 129"},
		{"bad headers", Config{Limiter: lim, Rules: src, Headers: 9}, "middleware: Config.Headers Headers(9) is not a Headers constant"},
		{"bad penalty size", Config{Limiter: lim, Rules: src, PenaltyClients: -1}, "middleware: Config.PenaltyClients -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := New(tc.cfg)
			assert.Nil(t, mw)
			assert.ErrorContains(t, err, tc.msg)
		})
	}
	_, err := New(Config{})
	assert.ErrorContains(t, err, "Limiter is nil")
	assert.ErrorContains(t, err, "Rules is nil", "every mistake at once")

	mw, err := New(Config{Limiter: lim, Rules: src})
	require.NoError(t, err)
	assert.PanicsWithValue(t, "middleware: wrapping a nil http.Handler", func() { mw(nil) })
}

func TestStrings(t *testing.T) {
	assert.Equal(t, []string{"BothHeaders", "XRateLimitHeaders", "IETFHeaders", "NoHeaders", "Headers(4)"},
		[]string{BothHeaders.String(), XRateLimitHeaders.String(), IETFHeaders.String(), NoHeaders.String(), Headers(4).String()})
}

// The limiter closed under the middleware: a caller's error, answered 500.
func TestClosedLimiter(t *testing.T) {
	lim, err := hybrid.New(hybrid.Config{})
	require.NoError(t, err)
	require.NoError(t, lim.Close(context.Background()))
	seen := &errorsSeen{}
	srv := serve(t, Config{Limiter: lim, OnError: seen.onError, Rules: rules.Static(compile(t, "rate_limits:\n  default: {requests: 1, window: 1}\n"))})
	assert.Equal(t, http.StatusInternalServerError, get(t, srv, "/").Status)
	assert.True(t, errors.Is(seen.last(t), hybrid.ErrClosed))
}
