package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// lockedBuffer is an io.Writer a test may read while a command writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The gateway limits a real client through to a real upstream.
func TestGatewayLimitsThroughToTheUpstream(t *testing.T) {
	var reached atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, "hello from upstream")
	}))
	defer upstream.Close()
	srv := redistest.Start(t)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, []byte("rate_limits:\n  default: {requests: 3, window: 1h}\n"), 0o644))

	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"gateway", "-listen", "127.0.0.1:0", "-upstream", upstream.URL, "-rules", rulesFile, "-redis", srv.Addr()}, out)
	}()
	var base string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`listening on (http://\S+),`).FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, "the gateway starts: %s", out)

	client := &http.Client{Timeout: 5 * time.Second}
	var statuses []int
	var limitedBody string
	for range 5 {
		resp, err := client.Get(base + "/api/items")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode == http.StatusOK {
			assert.Equal(t, "hello from upstream", string(body))
			assert.Equal(t, "3", resp.Header.Get("X-RateLimit-Limit"))
		} else {
			limitedBody = string(body)
			assert.NotEmpty(t, resp.Header.Get("Retry-After"))
		}
	}
	assert.Equal(t, []int{200, 200, 200, 429, 429}, statuses)
	assert.Equal(t, int64(3), reached.Load(), "only the admitted requests reach the upstream")
	assert.Contains(t, limitedBody, `"error":"rate_limit_exceeded"`)

	get := func(path string) string {
		resp, err := client.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	assert.Contains(t, get("/metrics"), `rate_limit_requests_total{result="limited"} 2`)
	assert.JSONEq(t, `{"status":"ok","mode":"async"}`, get("/healthz"))

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err, "a clean shutdown")
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not stop")
	}
}

func TestGatewayNeedsAnUpstream(t *testing.T) {
	var out strings.Builder
	assert.ErrorContains(t, run(context.Background(), []string{"gateway"}, &out), "-upstream")
}
