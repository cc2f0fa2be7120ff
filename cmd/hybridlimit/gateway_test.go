package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/testnet"
	"github.com/hybridlimit/hybridlimit/rules"
)

// hang bounds a wait that only a hang would reach, on a loaded 2-core
// machine.
const hang = 20 * time.Second

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

// gateway is a running `hybridlimit gateway`, its public and admin base
// URLs, and its output.
type gateway struct {
	base, admin string
	out         *lockedBuffer
	cancel      context.CancelFunc
	done        chan error
	stopped     bool
}

var (
	rePublic = regexp.MustCompile(`gateway listening on (http://\S+),`)
	reAdmin  = regexp.MustCompile(`admin listening on (http://\S+) `)
)

// startGateway runs the gateway with args (plus loopback listeners) and
// waits until it serves; the test's end stops it.
func startGateway(t *testing.T, args ...string) *gateway {
	t.Helper()
	g, err := tryGateway(t, args...)
	require.NoError(t, err, "the gateway starts")
	return g
}

// tryGateway is startGateway for a gateway that may refuse to start.
func tryGateway(t *testing.T, args ...string) (*gateway, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &gateway{out: &lockedBuffer{}, cancel: cancel, done: make(chan error, 1)}
	// -redis= first: never a Redis from the environment ($REDIS_ADDR), only
	// one the test started and names in args (a later flag wins).
	all := append([]string{"gateway", "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-redis="}, args...)
	go func() { g.done <- run(ctx, all, g.out) }()
	deadline := time.After(hang)
	for {
		select {
		case err := <-g.done:
			cancel()
			g.stopped = true
			return nil, err
		case <-deadline:
			cancel()
			t.Fatalf("the gateway did not start:\n%s", g.out)
		case <-time.After(5 * time.Millisecond):
		}
		out := g.out.String()
		if m := rePublic.FindStringSubmatch(out); m != nil {
			g.base = m[1]
			if m := reAdmin.FindStringSubmatch(out); m != nil {
				g.admin = m[1]
			}
			t.Cleanup(func() { g.stop(t) })
			return g, nil
		}
	}
}

// stop ends the gateway as SIGTERM does and returns what run returned.
func (g *gateway) stop(t *testing.T) error {
	t.Helper()
	if g.stopped {
		return nil
	}
	g.stopped = true
	g.cancel()
	select {
	case err := <-g.done:
		return err
	case <-time.After(hang):
		t.Fatalf("the gateway did not stop:\n%s", g.out)
		return nil
	}
}

var client = &http.Client{Timeout: hang}

// get returns the status and body of a GET with the given headers
// ("Name: value").
func get(t *testing.T, url string, headers ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// upstreamServer is a real upstream that counts what reaches it.
type upstreamServer struct {
	*httptest.Server
	hits  atomic.Int64
	paths sync.Map // path → true
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstreamServer {
	t.Helper()
	u := &upstreamServer{}
	if h == nil {
		h = func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello from upstream") }
	}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.paths.Store(r.URL.Path, true)
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// rulesFile writes a rules file and returns its path.
func rulesFile(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o644))
	return path
}

const threePerHour = "rate_limits:\n  default: {requests: 3, window: 1h}\n"

// metricValue reads one sample from the admin listener's /metrics.
func metricValue(t *testing.T, g *gateway, series string) string {
	t.Helper()
	_, _, body := get(t, g.admin+"/metrics")
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// The gateway limits a real client through to a real upstream.
func TestGatewayLimitsThroughToTheUpstream(t *testing.T) {
	up := newUpstream(t, nil)
	srv := redistest.Start(t)
	g := startGateway(t, "-upstream", up.URL, "-rules", rulesFile(t, threePerHour), "-redis", srv.Addr())

	var statuses []int
	var limitedBody string
	for range 5 {
		status, h, body := get(t, g.base+"/api/items")
		statuses = append(statuses, status)
		if status == http.StatusOK {
			assert.Equal(t, "hello from upstream", body)
			assert.Equal(t, "3", h.Get("X-RateLimit-Limit"))
		} else {
			limitedBody = body
			assert.NotEmpty(t, h.Get("Retry-After"))
		}
	}
	assert.Equal(t, []int{200, 200, 200, 429, 429}, statuses)
	assert.Equal(t, int64(3), up.hits.Load(), "only the admitted requests reach the upstream")
	assert.Contains(t, limitedBody, `"error":"rate_limit_exceeded"`)

	assert.Equal(t, "2", metricValue(t, g, `rate_limit_requests_total{result="limited"}`))
	status, _, body := get(t, g.admin+"/healthz")
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"status":"ok","mode":"async"}`, body)
	assert.NoError(t, g.stop(t), "a clean shutdown")
}

// Metrics, health and readiness are on the admin listener only: on the
// public one those paths are ordinary requests, limited and proxied.
func TestGatewayAdminListenerIsSeparate(t *testing.T) {
	up := newUpstream(t, nil)
	g := startGateway(t, "-upstream", up.URL, "-rules", rulesFile(t, threePerHour))

	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		status, _, body := get(t, g.base+path)
		assert.Equal(t, http.StatusOK, status)
		assert.Equal(t, "hello from upstream", body, "%s on the public listener is the upstream's", path)
	}
	status, _, _ := get(t, g.base+"/anything")
	assert.Equal(t, http.StatusTooManyRequests, status, "and counted against the client's limit")
	_, seen := up.paths.Load("/metrics")
	assert.True(t, seen)

	status, _, body := get(t, g.admin+"/metrics")
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "rate_limit_requests_total")
	assert.Contains(t, body, `gateway_upstream_breaker_state{state="closed"} 1`)
	for _, series := range []string{"go_goroutines ", "go_memstats_heap_inuse_bytes ", "process_open_fds ", "process_resident_memory_bytes "} {
		assert.Contains(t, body, series, "the Go runtime and the process, for leaks")
	}
	status, h, body := get(t, g.admin+"/readyz")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "application/json", h.Get("Content-Type"))
	assert.JSONEq(t, `{"ready":true,"status":"ok","mode":"local","fallback":"conservative","upstream":"closed"}`, body)
	status, _, _ = get(t, g.admin+"/api/items")
	assert.Equal(t, http.StatusNotFound, status, "the admin listener proxies nothing")
}

// Slow and idle clients (slowloris-style: headers or body a few bytes at a
// time, or a keep-alive connection left idle) are cut off by the server's
// timeouts, many at once, and none of it counts against the upstream.
func TestGatewayCutsOffSlowAndIdleClients(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	const readHeaderTimeout = 300 * time.Millisecond
	g := startGateway(t, "-upstream", up.URL, "-rules", rulesFile(t, "rate_limits:\n  default: {requests: 1000, window: 1s}\n"),
		"-read-header-timeout", readHeaderTimeout.String(), "-read-timeout", "600ms", "-idle-timeout", "300ms", "-upstream-failures", "1")
	addr := strings.TrimPrefix(g.base, "http://")

	// errLate is a request the server never saw because the client sent it
	// after the read-header timeout had already closed the connection: the
	// scheduler held the client's goroutine that long after the dial, as a
	// loaded machine does. The server did what it should; the client dials
	// again.
	errLate := errors.New("the request was sent after the read-header timeout")

	for _, tc := range []struct {
		name string
		// talk writes what the client sends before it goes quiet, on a
		// connection whose dial began at dialed.
		talk func(c net.Conn, dialed time.Time) error
	}{
		{"slow headers", func(c net.Conn, _ time.Time) error {
			_, err := io.WriteString(c, "GET /api HTTP/1.1\r\nHost: x\r\nX-Slow: a")
			return err
		}},
		{"slow body", func(c net.Conn, _ time.Time) error {
			_, err := io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789")
			return err
		}},
		{"idle keep-alive", func(c net.Conn, dialed time.Time) error {
			if _, err := io.WriteString(c, "GET /api HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				return err
			}
			sent := time.Since(dialed)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				if sent >= readHeaderTimeout {
					return fmt.Errorf("%w (%v after the dial): %w", errLate, sent, err)
				}
				return err
			}
			if resp.StatusCode != http.StatusOK || resp.Close {
				return fmt.Errorf("the request before going idle: %d, close %v", resp.StatusCode, resp.Close)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const clients = 200 // as many as held a gateway without timeouts for 70 s
			var wg sync.WaitGroup
			var late atomic.Int64
			errs := make(chan error, clients)
			for range clients {
				wg.Go(func() {
					for {
						// The server's read-header timeout runs from its
						// accept, which a loaded machine may make well before
						// Dial returns here: the time is taken before the dial.
						dialing := time.Now()
						c, err := net.Dial("tcp", addr)
						if err != nil {
							errs <- err
							return
						}
						err = tc.talk(c, dialing)
						if errors.Is(err, errLate) && late.Add(1) < 10*clients {
							_ = c.Close()
							continue
						}
						defer c.Close()
						if err != nil {
							errs <- err
							return
						}
						// Then nothing: the server must close the connection.
						_ = c.SetReadDeadline(time.Now().Add(hang))
						_, err = io.Copy(io.Discard, c)
						if ne, ok := err.(net.Error); ok && ne.Timeout() {
							errs <- fmt.Errorf("the connection was still open after %v", hang)
						}
						return
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := late.Load(); n > 0 {
				t.Logf("%d requests sent after the read-header timeout, and sent again", n)
			}
		})
	}
	status, _, _ := get(t, g.base+"/api")
	assert.Equal(t, http.StatusOK, status, "the gateway still serves")
	assert.Equal(t, "0", metricValue(t, g, "gateway_upstream_failures_total"), "slow clients are not the upstream failing")
	assert.Equal(t, "1", metricValue(t, g, `gateway_upstream_breaker_state{state="closed"}`))
}

// A client that does not read its response is cut off at the write timeout,
// and the upstream's response is not left streaming into it.
func TestGatewayCutsOffAClientThatDoesNotRead(t *testing.T) {
	const size = 256 << 20
	var writeFailed atomic.Bool
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		chunk := make([]byte, 64<<10)
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				writeFailed.Store(true)
				return
			}
		}
	})
	g := startGateway(t, "-upstream", up.URL, "-rules", rulesFile(t, threePerHour),
		"-write-timeout", "500ms", "-upstream-timeout", "400ms")
	c, err := net.Dial("tcp", strings.TrimPrefix(g.base, "http://"))
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	require.Eventually(t, writeFailed.Load, hang, 10*time.Millisecond, "the gateway stops reading from the upstream")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(hang)))
	n, _ := io.Copy(io.Discard, c)
	assert.Less(t, n, int64(size), "the response was cut off, not delivered")
}

// A blackholed upstream (it accepts and never answers) gets 504s in bounded
// time, then the breaker opens and the gateway answers 503 at once.
func TestGatewayBlackholedUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	var mu sync.Mutex
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		_ = ln.Close()
		<-accepted
		mu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		mu.Unlock()
	}()

	g := startGateway(t, "-upstream", "http://"+ln.Addr().String(), "-rules", rulesFile(t, "rate_limits:\n  default: {requests: 100, window: 1h}\n"),
		"-upstream-header-timeout", "200ms", "-upstream-failures", "2", "-upstream-open-for", "1h")
	for range 2 {
		status, _, body := get(t, g.base+"/api")
		assert.Equal(t, http.StatusGatewayTimeout, status)
		assert.Contains(t, body, `"error":"gateway_timeout"`)
	}
	status, h, body := get(t, g.base+"/api")
	assert.Equal(t, http.StatusServiceUnavailable, status, "the breaker is open")
	assert.Contains(t, body, `"error":"upstream_unavailable"`)
	assert.Equal(t, "3600", h.Get("Retry-After"))
	assert.Equal(t, "1", metricValue(t, g, `gateway_upstream_breaker_state{state="open"}`))
	assert.Equal(t, "2", metricValue(t, g, "gateway_upstream_timeouts_total"))
	assert.Equal(t, "1", metricValue(t, g, "gateway_upstream_rejected_total"))
	assert.Equal(t, "1", metricValue(t, g, `gateway_upstream_breaker_transitions_total{to="open"}`))
	assert.Contains(t, g.out.String(), "upstream breaker open")
	status, _, body = get(t, g.admin+"/readyz")
	assert.Equal(t, http.StatusOK, status, "a failing upstream is every gateway's problem: stay in rotation")
	assert.Contains(t, body, `"upstream":"open"`)
}

// While the upstream fails the gateway answers 503, probes it after
// -upstream-open-for, and closes the breaker once it answers again.
func TestGatewayUpstreamBreakerProbesAndCloses(t *testing.T) {
	var healthy atomic.Bool
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "back")
	})
	g := startGateway(t, "-upstream", up.URL, "-rules", rulesFile(t, "rate_limits:\n  default: {requests: 1000, window: 1h}\n"),
		"-upstream-failures", "3", "-upstream-open-for", "100ms")
	for range 3 {
		status, _, _ := get(t, g.base+"/")
		assert.Equal(t, http.StatusServiceUnavailable, status)
	}
	reached := up.hits.Load()
	status, _, body := get(t, g.base+"/")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "upstream_unavailable")
	assert.Equal(t, reached, up.hits.Load(), "not forwarded while open")

	healthy.Store(true)
	require.Eventually(t, func() bool {
		status, _, _ := get(t, g.base+"/")
		return status == http.StatusOK
	}, hang, 20*time.Millisecond)
	assert.Equal(t, "1", metricValue(t, g, `gateway_upstream_breaker_state{state="closed"}`))
	assert.Equal(t, "1", metricValue(t, g, `gateway_upstream_breaker_transitions_total{to="closed"}`))
	out := g.out.String()
	assert.Contains(t, out, "upstream breaker half-open")
	assert.Contains(t, out, "upstream breaker closed")
}

func TestGatewayBodyLimit(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})
	g := startGateway(t, "-upstream", up.URL, "-rules", rulesFile(t, threePerHour), "-max-body", "1KiB")
	post := func(n int) (int, string) {
		resp, err := client.Post(g.base+"/upload", "text/plain", strings.NewReader(strings.Repeat("x", n)))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := post(1024)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "1024", body)
	status, body = post(200 << 20)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status)
	assert.Contains(t, body, `"error":"request_too_large"`)
	assert.Equal(t, int64(1), up.hits.Load(), "the large body never reached the upstream")
}

// A dead port, for a Redis that is down: one no other test can take
// meanwhile (testnet.RefusingAddr).
func deadAddr(t *testing.T) string {
	t.Helper()
	return testnet.RefusingAddr(t)
}

func TestGatewayRefusesToStartWithoutRedisUnlessAsked(t *testing.T) {
	up := newUpstream(t, nil)
	_, err := tryGateway(t, "-upstream", up.URL, "-rules", rulesFile(t, threePerHour), "-redis", deadAddr(t))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unreachable")
	assert.Contains(t, err.Error(), "-start-degraded", "the error names the way out")
}

// Started degraded, the gateway serves on the fallback, says so on
// readiness, and finds Redis when it comes up.
func TestGatewayStartsDegraded(t *testing.T) {
	up := newUpstream(t, nil)
	srv := redistest.Start(t)
	srv.Kill()
	rules := rulesFile(t, "rate_limits:\n  default: {requests: 4, window: 1h}\n")
	g := startGateway(t, "-upstream", up.URL, "-rules", rules, "-redis", srv.Addr(), "-start-degraded", "-fleet-size", "2")
	assert.Contains(t, g.out.String(), "started degraded")

	status, _, body := get(t, g.admin+"/readyz")
	assert.Equal(t, http.StatusOK, status, "degraded on the conservative fallback: still ready")
	var ready map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &ready))
	assert.Equal(t, map[string]any{"ready": true, "status": "degraded", "mode": "async", "fallback": "conservative", "redis": "unreachable", "upstream": "closed"}, ready)
	status, _, body = get(t, g.admin+"/healthz")
	assert.Equal(t, http.StatusOK, status, "alive: restarting would not bring Redis back")
	assert.JSONEq(t, `{"status":"degraded","mode":"async"}`, body)

	var admitted int
	for range 4 {
		if status, _, _ := get(t, g.base+"/api"); status == http.StatusOK {
			admitted++
		}
	}
	assert.Equal(t, 2, admitted, "the limit divided by -fleet-size")

	srv.Restart()
	require.Eventually(t, func() bool {
		_, _, body := get(t, g.admin+"/readyz")
		return strings.Contains(body, `"status":"ok"`)
	}, hang, 50*time.Millisecond, "Redis found again")
}

func TestGatewayReadinessWhileDegraded(t *testing.T) {
	up := newUpstream(t, nil)
	rules := rulesFile(t, threePerHour)
	for _, tc := range []struct {
		name   string
		flags  []string
		status int
		reason string
	}{
		{"fail-closed refuses every request: not ready", []string{"-fallback", "fail-closed"}, 503, "fail-closed"},
		{"asked to be unready while degraded", []string{"-unready-when-degraded"}, 503, "unready-when-degraded"},
		{"fail-open serves: ready", []string{"-fallback", "fail-open"}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-upstream", up.URL, "-rules", rules, "-redis", deadAddr(t), "-start-degraded", "-fleet-size", "1"}, tc.flags...)
			g := startGateway(t, args...)
			status, _, body := get(t, g.admin+"/readyz")
			assert.Equal(t, tc.status, status, body)
			assert.Contains(t, body, tc.reason)
			assert.Contains(t, body, `"status":"degraded"`)
		})
	}
}

// On SIGTERM with -drain-delay, readiness turns 503 while requests are
// still served, so that load balancers stop sending first.
func TestGatewayDrains(t *testing.T) {
	up := newUpstream(t, nil)
	g := startGateway(t, "-upstream", up.URL, "-rules", rulesFile(t, threePerHour), "-drain-delay", "2s")
	status, _, _ := get(t, g.admin+"/readyz")
	require.Equal(t, http.StatusOK, status)
	g.cancel()
	require.Eventually(t, func() bool {
		status, _, _ := get(t, g.admin+"/readyz")
		return status == http.StatusServiceUnavailable
	}, hang, 10*time.Millisecond)
	_, _, body := get(t, g.admin+"/readyz")
	assert.Contains(t, body, `"status":"draining"`)
	status, _, _ = get(t, g.base+"/api")
	assert.Equal(t, http.StatusOK, status, "still serving while draining")
	assert.NoError(t, g.stop(t))
}

func TestGatewayRefusesToRunUnlimited(t *testing.T) {
	up := newUpstream(t, nil)
	for _, v := range []string{"RATE_LIMIT_ENABLED", "RATE_LIMIT_ALGORITHM", "RATE_LIMIT_DEFAULT", "RATE_LIMIT_WINDOW", "RATE_LIMIT_PER_IP", "RATE_LIMIT_PER_USER", "RATE_LIMIT_BURST"} {
		t.Setenv(v, "")
	}
	_, err := tryGateway(t, "-upstream", up.URL)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no limits")
	assert.Contains(t, err.Error(), "-allow-unlimited")

	_, err = tryGateway(t, "-upstream", up.URL, "-rules", rulesFile(t, "rate_limits:\n  ban: [10.0.0.0/8]\n"))
	require.Error(t, err, "a ban list alone limits nothing")
	assert.Contains(t, err.Error(), "sets no limit")

	g := startGateway(t, "-upstream", up.URL, "-allow-unlimited")
	for range 5 {
		status, _, _ := get(t, g.base+"/")
		assert.Equal(t, http.StatusOK, status)
	}

	t.Setenv("RATE_LIMIT_DEFAULT", "2")
	t.Setenv("RATE_LIMIT_WINDOW", "3600")
	g = startGateway(t, "-upstream", up.URL)
	var statuses []int
	for range 3 {
		status, _, _ := get(t, g.base+"/")
		statuses = append(statuses, status)
	}
	assert.Equal(t, []int{200, 200, 429}, statuses, "the environment's limit")
}

func TestGatewayClientKeying(t *testing.T) {
	up := newUpstream(t, nil)
	rules := rulesFile(t, "rate_limits:\n  default: {requests: 2, window: 1h}\n")
	admitted := func(g *gateway, headers ...string) int {
		n := 0
		for range 3 {
			status, _, _ := get(t, g.base+"/api", headers...)
			if status == http.StatusOK {
				n++
			}
		}
		return n
	}

	t.Run("ip", func(t *testing.T) {
		g := startGateway(t, "-upstream", up.URL, "-rules", rules)
		assert.Equal(t, 2, admitted(g, "X-API-Key: a"))
		assert.Equal(t, 0, admitted(g, "X-API-Key: b"), "one address, one budget, whatever the key")
	})
	t.Run("api-key", func(t *testing.T) {
		g := startGateway(t, "-upstream", up.URL, "-rules", rules, "-client", "api-key", "-api-key-header", "X-Token")
		assert.Equal(t, 2, admitted(g, "X-Token: a"))
		assert.Equal(t, 2, admitted(g, "X-Token: b"), "a budget per key")
		status, h, body := get(t, g.base+"/api")
		assert.Equal(t, http.StatusUnauthorized, status, "no key")
		assert.Contains(t, body, "X-Token")
		assert.NotEmpty(t, h.Get("WWW-Authenticate"))
	})
	t.Run("api-key-or-ip", func(t *testing.T) {
		g := startGateway(t, "-upstream", up.URL, "-rules", rules, "-client", "api-key-or-ip")
		assert.Equal(t, 2, admitted(g, "X-API-Key: a"))
		assert.Equal(t, 2, admitted(g), "no key: by address")
	})
	t.Run("ip-and-api-key", func(t *testing.T) {
		g := startGateway(t, "-upstream", up.URL, "-rules", rules, "-client", "ip-and-api-key")
		assert.Equal(t, 2, admitted(g, "X-API-Key: a"))
		assert.Equal(t, 2, admitted(g, "X-API-Key: b"))
		status, _, _ := get(t, g.base+"/api")
		assert.Equal(t, http.StatusUnauthorized, status)
	})
}

// client_id labels are hashed unless plain text is asked for.
func TestGatewayClientLabels(t *testing.T) {
	up := newUpstream(t, nil)
	rules := rulesFile(t, "rate_limits:\n  default: {requests: 1, window: 1h}\n")
	limited := func(g *gateway) string {
		for range 2 {
			get(t, g.base+"/api", "X-API-Key: s3cret-key")
		}
		_, _, body := get(t, g.admin+"/metrics")
		return body
	}
	body := limited(startGateway(t, "-upstream", up.URL, "-rules", rules, "-client", "api-key", "-hash-api-keys=false"))
	assert.Regexp(t, `rate_limit_client_exceeded_total\{client_id="key:[0-9a-f]{16}"\} 1`, body)
	assert.NotContains(t, body, "s3cret")

	body = limited(startGateway(t, "-upstream", up.URL, "-rules", rules))
	assert.Regexp(t, `rate_limit_client_exceeded_total\{client_id="ip:[0-9a-f]{16}"\} 1`, body)
	assert.NotContains(t, body, "127.0.0.1")

	body = limited(startGateway(t, "-upstream", up.URL, "-rules", rules, "-client", "api-key", "-hash-api-keys=false", "-client-labels", "plain"))
	assert.Contains(t, body, `rate_limit_client_exceeded_total{client_id="key:s3cret-key"} 1`)

	body = limited(startGateway(t, "-upstream", up.URL, "-rules", rules, "-client-labels", "none"))
	assert.NotContains(t, body, "rate_limit_client_exceeded_total")
}

// A rules file over -rules-max-size (1 MiB by default) stops the gateway
// at start with the file's size and the bound, before it is parsed; a
// reload to one keeps the rules in force and says why.
func TestGatewayRulesFileSizeBound(t *testing.T) {
	up := newUpstream(t, nil)
	large := rulesFile(t, largeRules(rules.DefaultMaxFileSize+1))
	_, err := tryGateway(t, "-upstream", up.URL, "-rules", large)
	require.Error(t, err)
	assert.ErrorContains(t, err, large+": the file is over the size bound of 1 MiB (1048576 bytes) on a rules file: it is 1.0 MiB (1048577 bytes)")
	startGateway(t, "-upstream", up.URL, "-rules", large, "-rules-max-size", "2MiB")

	path := rulesFile(t, threePerHour)
	g := startGateway(t, "-upstream", up.URL, "-rules", path, "-rules-max-size", "4KiB")
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte(largeRules(5000)), 0o644))
	require.NoError(t, os.Rename(tmp, path))
	require.Eventually(t, func() bool { return strings.Contains(g.out.String(), "over the size bound of 4 KiB") }, hang, 10*time.Millisecond,
		"the reload is refused:\n%s", g.out)
	assert.Contains(t, g.out.String(), "rules not reloaded: keeping the old ones")
	admitted := 0
	for range 4 {
		if status, _, _ := get(t, g.base+"/api"); status == http.StatusOK {
			admitted++
		}
	}
	assert.Equal(t, 3, admitted, "the rules in force: 3 an hour")
}

func TestGatewayFlagErrors(t *testing.T) {
	up := "http://127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "-upstream"},
		{[]string{"-upstream", "ftp://x"}, `scheme "ftp"`},
		{[]string{"-upstream", up, "-upstream-timeout", "40s"}, "-upstream-timeout 40s must be shorter than -write-timeout 35s"},
		{[]string{"-upstream", up, "-admin", defaultListen}, "must not be public"},
		{[]string{"-upstream", up, "-client", "cookie"}, `unknown client keying "cookie"`},
		{[]string{"-upstream", up, "-fallback", "maybe"}, `unknown fallback "maybe"`},
		{[]string{"-upstream", up, "-max-body", "ten"}, `size "ten"`},
		{[]string{"-upstream", up, "-start-degraded"}, "-start-degraded needs -redis"},
		{[]string{"-upstream", up, "-trusted-proxies", "10.1.2.3/8"}, "-trusted-proxies"},
		{[]string{"-upstream", up, "-upstream-fail-statuses", "5xx"}, `status "5xx"`},
		{[]string{"-upstream", up, "-read-timeout", "-1s"}, "-read-timeout -1s is negative"},
		{[]string{"-upstream", up, "-rules-max-size", "0"}, "-rules-max-size 0 must be positive"},
		{[]string{"-upstream", up, "extra"}, "unexpected arguments"},
	} {
		var out strings.Builder
		t.Setenv("REDIS_ADDR", "")
		err := run(context.Background(), append([]string{"gateway"}, tc.args...), &out)
		if assert.Error(t, err, tc.args) {
			assert.Contains(t, err.Error(), tc.want, tc.args)
		}
	}
}

func TestGatewayRedisClient(t *testing.T) {
	c, where, err := gatewayRedis("127.0.0.1:6390")
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, "127.0.0.1:6390", where)
	assert.True(t, c.(*redis.Client).Options().ContextTimeoutEnabled, "deadlines reach the socket")

	c2, where, err := gatewayRedis("redis://user:pw@10.0.0.5:6380/2")
	require.NoError(t, err)
	defer c2.Close()
	assert.Equal(t, "10.0.0.5:6380", where, "no password in what is printed")
	o := c2.(*redis.Client).Options()
	assert.True(t, o.ContextTimeoutEnabled)
	assert.Equal(t, 2, o.DB)
	assert.Equal(t, "pw", o.Password)

	_, _, err = gatewayRedis("redis://[bad")
	assert.ErrorContains(t, err, "gateway: -redis")
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "1KiB": 1024, "10MiB": 10 << 20, "1GiB": 1 << 30, "2MB": 2e6, "5 KB": 5000, "7B": 7} {
		var b byteSize
		require.NoError(t, b.Set(in), in)
		assert.Equal(t, want, int64(b), in)
	}
	for _, in := range []string{"", "-1", "1.5MiB", "ten", "1TiB", "99999999999GiB"} {
		var b byteSize
		assert.Error(t, b.Set(in), in)
	}
	b := byteSize(10 << 20)
	assert.Equal(t, "10MiB", b.String())
	b = 1000
	assert.Equal(t, "1000", b.String())
}
