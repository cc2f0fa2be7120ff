package middleware

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// epoch is the instant the manual clocks start at: a whole second, so that
// X-RateLimit-Reset is easy to read.
var epoch = time.Unix(1_800_000_000, 0)

// manualLimiter returns a local-only limiter on a manual clock reading at,
// closed when the test ends.
func manualLimiter(t testing.TB, at time.Time) (*hybrid.Limiter, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(at)
	return newLimiter(t, hybrid.Config{Clock: clk}), clk
}

// newLimiter returns a limiter configured by cfg, closed when the test ends.
func newLimiter(t testing.TB, cfg hybrid.Config) *hybrid.Limiter {
	t.Helper()
	l, err := hybrid.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = l.Close(ctx)
	})
	return l
}

// compile builds Rules from the YAML of a rules file.
func compile(t testing.TB, yaml string) *rules.Rules {
	t.Helper()
	cfg, err := rules.Parse([]byte(yaml))
	require.NoError(t, err)
	r, err := rules.Compile(cfg)
	require.NoError(t, err)
	return r
}

// quiet is a logger that drops everything, for tests that provoke errors.
var quiet = slog.New(slog.DiscardHandler)

// okHandler answers 200 "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok")
})

// serve starts a real HTTP server running cfg's middleware around
// okHandler, closed when the test ends.
func serve(t testing.TB, cfg Config) *httptest.Server {
	t.Helper()
	return serveWith(t, cfg, nil)
}

// serveWith is serve with outer, if not nil, around the middleware: an
// application's authentication, say.
func serveWith(t testing.TB, cfg Config, outer func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	mw, err := New(cfg)
	require.NoError(t, err)
	h := mw(okHandler)
	if outer != nil {
		h = outer(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// userKey is the context key of the test's authenticated user.
type userKey struct{}

// authenticate is the application's authentication as a test plays it: the
// X-User header names the user.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("X-User"); id != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, id))
		}
		next.ServeHTTP(w, r)
	})
}

// userOf reads the user authenticate stored.
func userOf(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(userKey{}).(string)
	return id, ok
}

// tierOf reads the X-Tier header.
func tierOf(r *http.Request) string { return r.Header.Get("X-Tier") }

// priorityOf reads the X-Priority header.
func priorityOf(r *http.Request) bool { return r.Header.Get("X-Priority") == "high" }

// response is what a test reads of one response.
type response struct {
	Status int
	Header http.Header
	Body   string
}

// get sends one GET for path to srv with the given header lines
// ("Name: value").
func get(t testing.TB, srv *httptest.Server, path string, header ...string) response {
	t.Helper()
	return do(t, srv.Client(), srv.URL+path, header...)
}

// do sends one GET for url through c.
func do(t testing.TB, c *http.Client, url string, header ...string) response {
	t.Helper()
	resp, err := tryDo(c, url, header...)
	require.NoError(t, err)
	return resp
}

// tryDo sends one GET for url through c, with the given header lines
// ("Name: value"), and reads the whole response.
func tryDo(c *http.Client, url string, header ...string) (response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return response{}, err
	}
	for _, h := range header {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			return response{}, fmt.Errorf("header line %q without a colon", h)
		}
		req.Header.Add(name, strings.TrimSpace(value))
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}, err
}

// statuses sends n GETs for path and returns their status codes.
func statuses(t testing.TB, srv *httptest.Server, path string, n int, header ...string) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i] = get(t, srv, path, header...).Status
	}
	return out
}

// repeat returns n copies of v.
func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu       sync.Mutex
	checks   []observe.CheckEvent
	requests []observe.RequestEvent
}

func (r *recorder) ObserveCheck(e observe.CheckEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, e)
}

func (r *recorder) ObserveRequest(e observe.RequestEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, e)
}

// take returns the events so far and forgets them.
func (r *recorder) take() ([]observe.CheckEvent, []observe.RequestEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, q := r.checks, r.requests
	r.checks, r.requests = nil, nil
	return c, q
}

// last returns the last request's event, and forgets every event.
func (r *recorder) last(t testing.TB) observe.RequestEvent {
	t.Helper()
	_, reqs := r.take()
	require.NotEmpty(t, reqs)
	return reqs[len(reqs)-1]
}

// checkRules returns the rules of the checks observed so far, in order, and
// forgets every event.
func (r *recorder) checkRules() []string {
	checks, _ := r.take()
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.Rule
	}
	return out
}

// outcomes returns the outcomes of the requests observed so far, and forgets
// every event.
func (r *recorder) outcomes() []observe.Outcome {
	_, reqs := r.take()
	out := make([]observe.Outcome, len(reqs))
	for i, q := range reqs {
		out[i] = q.Outcome
	}
	return out
}

// rateHeaders picks the rate-limit fields of h, for exact comparison.
func rateHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"} {
		if vs := h.Values(name); len(vs) > 0 {
			out[name] = strings.Join(vs, " | ")
		}
	}
	return out
}
