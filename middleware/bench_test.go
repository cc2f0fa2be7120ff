package middleware

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// sink is a ResponseWriter that keeps nothing, and reuses its header map,
// so that a benchmark counts the middleware's allocations only.
type sink struct {
	h      http.Header
	status int
}

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) Write(b []byte) (int, error) { return len(b), nil }
func (s *sink) WriteHeader(code int)        { s.status = code }
func (s *sink) reset()                      { clear(s.h); s.status = 0 }

// hotPath returns a handler and a request it admits: the global, per_ip and
// default rules, keyed by address, with every header family.
func hotPath(t testing.TB, obs observe.Observer) (http.Handler, *http.Request) {
	lim, _ := manualLimiter(t, epoch)
	mw, err := New(Config{Limiter: lim, Observer: obs, Rules: rules.Static(compile(t, `rate_limits:
  global: {requests: 1000000000, window: 1}
  per_ip: {requests: 1000000000, window: 1}
  default: {requests: 1000000000, window: 1}
`))})
	require.NoError(t, err)
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest(http.MethodGet, "/api/v1/items", nil)
	return h, r
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) ObserveCheck(observe.CheckEvent)     {}
func (nopObserver) ObserveRequest(observe.RequestEvent) {}

// An admitted request allocates the client key (the extractor), its address
// key for per_ip limits, the per_ip and default keys (rules.Plan; the global
// key is constant), one string for every header value and one slice for them
// all: 6.
func TestHotPathAllocations(t *testing.T) {
	for name, obs := range map[string]observe.Observer{"no observer": nil, "observer": nopObserver{}} {
		t.Run(name, func(t *testing.T) {
			h, r := hotPath(t, obs)
			w := &sink{h: http.Header{}}
			allocs := testing.AllocsPerRun(1000, func() {
				w.reset()
				h.ServeHTTP(w, r)
			})
			assert.Equal(t, 0, w.status, "admitted: the handler wrote nothing")
			assert.Len(t, w.h, 5)
			if raceEnabled {
				// The race detector's sync.Pool drops items at random, so
				// pooled slices are sometimes made anew.
				assert.GreaterOrEqual(t, allocs, 6.0)
				assert.LessOrEqual(t, allocs, 8.0)
			} else {
				assert.Equal(t, 6.0, allocs)
			}
		})
	}
}

func BenchmarkMiddleware(b *testing.B) {
	for name, obs := range map[string]observe.Observer{"no observer": nil, "observer": nopObserver{}} {
		b.Run(name, func(b *testing.B) {
			h, r := hotPath(b, obs)
			w := &sink{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				w.reset()
				h.ServeHTTP(w, r)
			}
		})
	}
}
