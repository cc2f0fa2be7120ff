package middleware

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Rules reloaded from a file while many clients send requests: no request
// fails, an invalid file changes nothing, and each valid one takes effect.
func TestReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	perSecond := func(n int) string {
		return fmt.Sprintf("rate_limits:\n  default: {requests: %d, window: 1}\n", n)
	}
	require.NoError(t, os.WriteFile(path, []byte(perSecond(100000)), 0o600))
	var reloadErrs atomic.Int64
	w, err := rules.Watch(context.Background(), path, rules.WatchOptions{
		Debounce: 5 * time.Millisecond,
		OnError:  func(error) { reloadErrs.Add(1) },
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })

	lim := newLimiter(t, hybrid.Config{})
	srv := serve(t, Config{Limiter: lim, Rules: w.Current, Client: httpkey.APIKey(httpkey.APIKeyConfig{})})

	// The load: clients each under its own key, until stopped.
	const clients = 16
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var sent, failed atomic.Int64
	var byStatus [600]atomic.Int64
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = clients // keep-alive for every client: load, not connection churn
	t.Cleanup(tr.CloseIdleConnections)
	for i := range clients {
		wg.Go(func() {
			c := &http.Client{Transport: tr}
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/x", nil)
				req.Header.Set("X-API-Key", "client-"+strconv.Itoa(i))
				resp, err := c.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
					}
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				sent.Add(1)
				byStatus[resp.StatusCode].Add(1)
			}
		})
	}
	defer func() { stop(); wg.Wait() }()

	// loaded waits until the clients have sent a few more requests each.
	loaded := func() {
		t.Helper()
		from := sent.Load()
		require.Eventually(t, func() bool { return sent.Load() >= from+4*clients }, 10*time.Second, time.Millisecond, "under load")
	}
	// limitSeen waits until the probe client's responses announce want,
	// and the load goes on under them.
	limitSeen := func(want string) {
		t.Helper()
		defer loaded()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			resp, err := tryDo(srv.Client(), srv.URL+"/x", "X-API-Key: probe")
			if assert.NoError(c, err) {
				assert.Equal(c, want, resp.Header.Get("X-RateLimit-Limit"))
			}
		}, 10*time.Second, 2*time.Millisecond, "the rules announcing %s take effect", want)
	}
	replace := func(content string) {
		t.Helper()
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	loaded()

	replace(perSecond(50000))
	limitSeen("50000")
	before := reloadErrs.Load()
	replace("rate_limits:\n  default: {requests: -5, window: 1}\n")
	require.Eventually(t, func() bool { return reloadErrs.Load() > before }, 10*time.Second, time.Millisecond, "an invalid file is reported")
	require.NoError(t, os.WriteFile(path, []byte("rate_limits: [not, a, map"), 0o600)) // in place, as a careless editor would
	require.Eventually(t, func() bool { return reloadErrs.Load() > before+1 }, 10*time.Second, time.Millisecond)
	limitSeen("50000") // kept
	for i := range 5 {
		replace(perSecond(40000 + i)) // a burst of edits: the last one wins
	}
	limitSeen("40004")
	replace("rate_limits:\n  default: {requests: 2, window: 1h}\n")
	limitSeen("2")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := tryDo(srv.Client(), srv.URL+"/x", "X-API-Key: probe")
		if assert.NoError(c, err) {
			assert.Equal(c, http.StatusTooManyRequests, resp.Status)
		}
	}, 10*time.Second, time.Millisecond, "the tight limit is enforced")
	replace(perSecond(100000))
	limitSeen("100000")
	assert.Equal(t, http.StatusOK, get(t, srv, "/x", "X-API-Key: probe").Status)

	stop()
	wg.Wait()
	var fivexx int64
	for code := 500; code < 600; code++ {
		fivexx += byStatus[code].Load()
	}
	assert.Zero(t, failed.Load(), "no request failed")
	assert.Zero(t, fivexx, "no 5xx")
	assert.Equal(t, sent.Load(), byStatus[200].Load()+byStatus[429].Load(), "only 200 and 429")
	assert.Positive(t, byStatus[429].Load(), "the clients met the tight limit too")
	t.Logf("%d requests from %d clients: %d admitted, %d limited; %d reloads refused",
		sent.Load(), clients, byStatus[200].Load(), byStatus[429].Load(), reloadErrs.Load())
}
