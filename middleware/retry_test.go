package middleware

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/rules"
)

// getter sends one GET, retrying each 429 after the Retry-After it carries,
// and returns the final status. It counts the 429s it waited out in denied.
type getter func(url string, denied *atomic.Int64) (status int, err error)

// burstLimit is the endpoint's limit in the retry tests: 10 a second, burst
// 10.
var burstLimit = limit.PerSecond(10)

// testBurstHonouringRetryAfter sends a burst of requests through clients
// that honour Retry-After, and checks that all of them finish while the
// server never admits more than the limit allows: at any admission, the
// admissions so far are at most Capacity + rate × the time since the burst
// started.
func testBurstHonouringRetryAfter(t *testing.T, newGetter func(t *testing.T, srv *httptest.Server) getter) {
	const clients, each = 3, 10
	lim := newLimiter(t, hybrid.Config{}) // the real clock: the clients really wait
	mw, err := New(Config{Limiter: lim, Logger: quiet, Rules: rules.Static(compile(t, fmt.Sprintf(`rate_limits:
  endpoints:
    /limited: {requests: %d, window: 1}
`, burstLimit.Rate)))})
	require.NoError(t, err)

	var mu sync.Mutex
	var admitted []time.Time
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		admitted = append(admitted, time.Now())
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	do := newGetter(t, srv)

	start := time.Now()
	var denied atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients*each)
	for range clients {
		wg.Go(func() {
			for range each {
				status, err := do(srv.URL+"/limited", &denied)
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("status %d", status)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	elapsed := time.Since(start)

	require.Len(t, admitted, clients*each, "every request finished")
	assert.Positive(t, denied.Load(), "the burst was limited, and the clients waited")
	slices.SortFunc(admitted, func(a, b time.Time) int { return a.Compare(b) })
	rate := float64(burstLimit.Rate) / burstLimit.Period.Seconds()
	for i, at := range admitted {
		allowed := float64(burstLimit.Capacity()) + rate*at.Sub(start).Seconds()
		assert.LessOrEqual(t, float64(i+1), allowed, "admission %d at %v", i+1, at.Sub(start))
	}
	t.Logf("%d requests in %v, %d 429s waited out", len(admitted), elapsed.Round(time.Millisecond), denied.Load())
}

// A plain net/http client that honours Retry-After.
func TestBurstHonouringRetryAfter(t *testing.T) {
	testBurstHonouringRetryAfter(t, func(t *testing.T, srv *httptest.Server) getter {
		c := srv.Client()
		return func(url string, denied *atomic.Int64) (int, error) {
			for range 30 {
				resp, err := c.Get(url)
				if err != nil {
					return 0, err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					return resp.StatusCode, nil
				}
				secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				if err != nil || secs < 1 {
					return 0, fmt.Errorf("429 with Retry-After %q", resp.Header.Get("Retry-After"))
				}
				denied.Add(1)
				time.Sleep(time.Duration(secs) * time.Second)
			}
			return 0, fmt.Errorf("still limited after 30 tries")
		}
	})
}
