package middleware

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// go-retryablehttp with a retry policy that retries 429s only and a backoff
// that waits exactly the Retry-After.
func TestRetryablehttpHonoursRetryAfter(t *testing.T) {
	testBurstHonouringRetryAfter(t, func(t *testing.T, srv *httptest.Server) getter {
		return func(url string, denied *atomic.Int64) (int, error) {
			c := retryablehttp.NewClient()
			c.HTTPClient = srv.Client()
			c.Logger = nil
			c.RetryMax = 30
			c.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
				if err != nil || ctx.Err() != nil {
					return false, err
				}
				if resp.StatusCode != http.StatusTooManyRequests {
					return false, nil
				}
				if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || secs < 1 {
					return false, fmt.Errorf("429 with Retry-After %q", resp.Header.Get("Retry-After"))
				}
				denied.Add(1)
				return true, nil
			}
			c.Backoff = func(_, _ time.Duration, _ int, resp *http.Response) time.Duration {
				secs, _ := strconv.Atoi(resp.Header.Get("Retry-After")) // checked by CheckRetry
				return time.Duration(secs) * time.Second
			}
			resp, err := c.Get(url)
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			return resp.StatusCode, nil
		}
	})
}
