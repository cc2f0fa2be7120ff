package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/testnet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hang bounds a wait that only a hang would reach, on a loaded machine.
const hang = 10 * time.Second

// syncBuffer is a log destination tests read while handlers write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is a real upstream, a Proxy in front of it served by a real
// server, and a real client.
type harness struct {
	upstream *httptest.Server
	hits     atomic.Int64
	proxy    *Proxy
	front    *httptest.Server
	client   *http.Client
	log      *syncBuffer
}

func newHarness(t *testing.T, cfg Config, h http.HandlerFunc) *harness {
	t.Helper()
	hs := &harness{log: &syncBuffer{}}
	hs.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hs.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(hs.upstream.Close)
	if cfg.Target == nil {
		cfg.Target, _ = url.Parse(hs.upstream.URL)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(hs.log, nil))
	p, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	hs.proxy = p
	hs.front = httptest.NewServer(p)
	t.Cleanup(hs.front.Close)
	hs.client = &http.Client{Timeout: hang}
	t.Cleanup(hs.client.CloseIdleConnections)
	return hs
}

// get sends a request and returns its status, headers and body.
func (hs *harness) do(t *testing.T, req *http.Request) (int, http.Header, string) {
	t.Helper()
	resp, err := hs.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func (hs *harness) get(t *testing.T, path string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, hs.front.URL+path, nil)
	require.NoError(t, err)
	return hs.do(t, req)
}

// code reads the "error" field of a JSON answer.
func code(t *testing.T, body string) string {
	t.Helper()
	var a answer
	require.NoError(t, json.Unmarshal([]byte(body), &a), body)
	return a.Error
}

func TestForwards(t *testing.T) {
	hs := newHarness(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Host", r.Host)
		w.Header().Set("X-Seen-For", r.Header.Get("X-Forwarded-For"))
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "upstream says "+r.URL.Path)
	})
	req, err := http.NewRequest(http.MethodGet, hs.front.URL+"/api/items", nil)
	require.NoError(t, err)
	req.Host = "api.example.com"
	status, h, body := hs.do(t, req)
	assert.Equal(t, http.StatusTeapot, status, "the upstream's own status passes through")
	assert.Equal(t, "upstream says /api/items", body)
	assert.Equal(t, "api.example.com", h.Get("X-Seen-Host"), "the Host header is passed on")
	assert.Equal(t, "127.0.0.1", h.Get("X-Seen-For"))
	s := hs.proxy.Stats()
	assert.Equal(t, uint64(1), s.Forwarded)
	assert.Zero(t, s.Failures)
	assert.Equal(t, Closed, s.State)
}

func TestBreakerOpensAndAnswers503AtOnce(t *testing.T) {
	var transitions []string
	var mu sync.Mutex
	hs := newHarness(t, Config{Failures: 3, OpenFor: time.Hour, OnStateChange: func(from, to State) {
		mu.Lock()
		defer mu.Unlock()
		transitions = append(transitions, from.String()+"→"+to.String())
	}}, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	for range 3 {
		status, _, _ := hs.get(t, "/")
		assert.Equal(t, http.StatusServiceUnavailable, status, "the upstream's 503, passed through")
	}
	assert.Equal(t, int64(3), hs.hits.Load())
	assert.Equal(t, Open, hs.proxy.State(), "three failures in a row open it")

	for range 5 {
		status, h, body := hs.get(t, "/")
		assert.Equal(t, http.StatusServiceUnavailable, status)
		assert.Equal(t, CodeUnavailable, code(t, body))
		assert.Equal(t, "3600", h.Get("Retry-After"), "until the probe, rounded up")
		assert.Equal(t, "application/json", h.Get("Content-Type"))
	}
	assert.Equal(t, int64(3), hs.hits.Load(), "nothing more reaches a failing upstream")
	s := hs.proxy.Stats()
	assert.Equal(t, uint64(5), s.Rejected)
	assert.Equal(t, uint64(3), s.Failures)
	assert.Equal(t, uint64(1), s.Transitions[Open])
	mu.Lock()
	assert.Equal(t, []string{"closed→open"}, transitions)
	mu.Unlock()
	assert.Equal(t, 1, strings.Count(hs.log.String(), "upstream breaker open"), "logged once: %s", hs.log)
	assert.Contains(t, hs.log.String(), "answered 503 Service Unavailable", "with the failure that opened it")
}

func TestSuccessesBetweenFailuresKeepItClosed(t *testing.T) {
	var n atomic.Int64
	hs := newHarness(t, Config{Failures: 2}, func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	for range 10 {
		hs.get(t, "/")
	}
	assert.Equal(t, Closed, hs.proxy.State(), "failures are counted in a row")
	assert.Equal(t, uint64(5), hs.proxy.Stats().Failures)
}

func TestHalfOpenProbeClosesOrReopens(t *testing.T) {
	var healthy atomic.Bool
	// gobreaker reads the real clock, so OpenFor is real time here: short.
	hs := newHarness(t, Config{Failures: 1, OpenFor: 50 * time.Millisecond}, func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusGatewayTimeout)
		}
	})
	hs.get(t, "/")
	require.Equal(t, Open, hs.proxy.State())

	// Still failing: the probe fails and the breaker opens again.
	require.Eventually(t, func() bool { return hs.proxy.State() == HalfOpen }, hang, 5*time.Millisecond)
	hits := hs.hits.Load()
	status, _, _ := hs.get(t, "/")
	assert.Equal(t, http.StatusGatewayTimeout, status, "the probe went through")
	assert.Equal(t, hits+1, hs.hits.Load())
	assert.Equal(t, Open, hs.proxy.State(), "a failed probe reopens")

	// Healed: the next probe closes it, and traffic flows.
	healthy.Store(true)
	require.Eventually(t, func() bool { return hs.proxy.State() == HalfOpen }, hang, 5*time.Millisecond)
	status, _, _ = hs.get(t, "/")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, Closed, hs.proxy.State())
	for range 3 {
		status, _, _ = hs.get(t, "/")
		assert.Equal(t, http.StatusOK, status)
	}
	s := hs.proxy.Stats()
	assert.Equal(t, [3]uint64{Closed: 1, HalfOpen: 2, Open: 2}, s.Transitions)
	log := hs.log.String()
	assert.Equal(t, 2, strings.Count(log, "upstream breaker open"), log)
	assert.Equal(t, 2, strings.Count(log, "upstream breaker half-open"), log)
	assert.Equal(t, 1, strings.Count(log, "upstream breaker closed"), log)
}

func TestHalfOpenLetsOnlyTheProbesThrough(t *testing.T) {
	release := make(chan struct{})
	var failing atomic.Bool
	failing.Store(true)
	hs := newHarness(t, Config{Failures: 1, OpenFor: 50 * time.Millisecond}, func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		<-release // the probe hangs until released
	})
	hs.get(t, "/")
	failing.Store(false)
	require.Eventually(t, func() bool { return hs.proxy.State() == HalfOpen }, hang, 5*time.Millisecond)
	probe := make(chan int, 1)
	go func() {
		resp, err := hs.client.Get(hs.front.URL + "/")
		if err != nil {
			probe <- 0
			return
		}
		_ = resp.Body.Close()
		probe <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return hs.hits.Load() == 2 }, hang, 5*time.Millisecond, "the probe reached the upstream")
	status, h, body := hs.get(t, "/")
	assert.Equal(t, http.StatusServiceUnavailable, status, "one probe at a time")
	assert.Equal(t, CodeUnavailable, code(t, body))
	assert.Equal(t, "1", h.Get("Retry-After"))
	close(release)
	assert.Equal(t, http.StatusOK, <-probe)
	assert.Equal(t, Closed, hs.proxy.State())
}

func TestConnectionRefusedIs502AndAFailure(t *testing.T) {
	dead, _ := url.Parse("http://" + testnet.RefusingAddr(t))
	hs := newHarness(t, Config{Target: dead, Failures: 2, OpenFor: time.Hour}, func(http.ResponseWriter, *http.Request) {})
	for range 2 {
		status, _, body := hs.get(t, "/")
		assert.Equal(t, http.StatusBadGateway, status)
		assert.Equal(t, CodeBadGateway, code(t, body))
		assert.NotContains(t, body, "127.0.0.1", "the answer does not describe the network")
	}
	status, _, _ := hs.get(t, "/")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, hs.log.String(), "connection refused")
}

// A blackholed upstream: it accepts connections and never answers.
func blackhole(t *testing.T) (*url.URL, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	u, _ := url.Parse("http://" + ln.Addr().String())
	return u, func() int { mu.Lock(); defer mu.Unlock(); return len(conns) }
}

func TestSilentUpstreamIs504(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"response header timeout", Config{ResponseHeaderTimeout: 100 * time.Millisecond}},
		{"whole exchange timeout", Config{ResponseHeaderTimeout: -1, Timeout: 100 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, _ := blackhole(t)
			tc.cfg.Target, tc.cfg.Failures = target, 2
			hs := newHarness(t, tc.cfg, func(http.ResponseWriter, *http.Request) {})
			for range 2 {
				status, _, body := hs.get(t, "/")
				assert.Equal(t, http.StatusGatewayTimeout, status)
				assert.Equal(t, CodeTimeout, code(t, body))
			}
			s := hs.proxy.Stats()
			assert.Equal(t, uint64(2), s.Timeouts)
			assert.Equal(t, uint64(2), s.Failures)
			assert.Equal(t, Open, s.State, "a silent upstream opens the breaker")
		})
	}
}

func TestStalledBodyIsCutAtTheTimeout(t *testing.T) {
	hs := newHarness(t, Config{Timeout: 200 * time.Millisecond, Failures: 1, OpenFor: time.Hour}, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // then nothing, until the proxy gives up
	})
	resp, err := hs.client.Get(hs.front.URL + "/")
	require.NoError(t, err, "the headers arrive")
	_, err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Error(t, err, "the body is cut off, not left hanging")
	require.Eventually(t, func() bool { return hs.proxy.Stats().Timeouts == 1 }, hang, 5*time.Millisecond)
	assert.Equal(t, Open, hs.proxy.State())
}

func TestClientGoingAwayIsNotTheUpstreamsFault(t *testing.T) {
	release := make(chan struct{})
	hs := newHarness(t, Config{Failures: 1}, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.front.URL+"/", nil)
		require.NoError(t, err)
		go func() {
			for hs.hits.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		_, err = hs.client.Do(req)
		require.ErrorIs(t, err, context.Canceled)
		hs.hits.Store(0)
	}
	require.Eventually(t, func() bool { return hs.proxy.Stats().Forwarded == 3 }, hang, 5*time.Millisecond)
	// The proxy's handler finishes after the client left: wait for it.
	require.Eventually(t, func() bool {
		hs.front.CloseClientConnections()
		return hs.proxy.State() == Closed && hs.proxy.Stats().Failures == 0
	}, hang, 5*time.Millisecond)
	assert.Equal(t, Closed, hs.proxy.State())
	assert.Zero(t, hs.proxy.Stats().Failures)
}

func TestBodyLimit(t *testing.T) {
	var read atomic.Int64
	hs := newHarness(t, Config{MaxBodyBytes: 1000, Failures: 1}, func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		read.Add(n)
		if err != nil {
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	post := func(body io.Reader, length int64) (int, string) {
		req, err := http.NewRequest(http.MethodPost, hs.front.URL+"/upload", body)
		require.NoError(t, err)
		req.ContentLength = length
		status, _, b := hs.do(t, req)
		return status, b
	}

	status, body := post(strings.NewReader(strings.Repeat("x", 1000)), 1000)
	assert.Equal(t, http.StatusOK, status, "at the limit: forwarded")
	assert.Equal(t, "ok", body)

	status, body = post(strings.NewReader(strings.Repeat("x", 200<<10)), 200<<10)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, "a declared length over the limit")
	assert.Equal(t, CodeTooLarge, code(t, body))
	assert.Equal(t, int64(1), hs.hits.Load(), "never forwarded")

	// Chunked: no declared length, cut at the limit.
	status, body = post(io.MultiReader(strings.NewReader(strings.Repeat("x", 200<<10))), -1)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, "a chunked body over the limit: %s", body)
	assert.LessOrEqual(t, read.Load(), int64(2000), "the upstream saw at most the limit of each")

	s := hs.proxy.Stats()
	assert.Equal(t, uint64(2), s.TooLarge)
	assert.Zero(t, s.Failures, "a client's big body is not the upstream failing")
	assert.Equal(t, Closed, s.State)
}

func TestFailureStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		fs     func(int) bool
		opens  bool
	}{
		{"500 by default: a request's bug, not a service down", 500, nil, false},
		{"429 from the upstream", 429, nil, false},
		{"502 by default", 502, nil, true},
		{"504 by default", 504, nil, true},
		{"500 when asked", 500, func(s int) bool { return s >= 500 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, Config{Failures: 2, OpenFor: time.Hour, FailureStatus: tc.fs}, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
			})
			hs.get(t, "/")
			hs.get(t, "/")
			assert.Equal(t, tc.opens, hs.proxy.State() == Open)
		})
	}
}

func TestConfigErrors(t *testing.T) {
	ftp, _ := url.Parse("ftp://example.com")
	rel, _ := url.Parse("/relative")
	ok, _ := url.Parse("http://127.0.0.1:1")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "upstream: target <nil>"},
		{Config{Target: rel}, "upstream: target /relative: want an absolute URL"},
		{Config{Target: ftp}, `upstream: target ftp://example.com: scheme "ftp", want http or https`},
		{Config{Target: ok, OpenFor: -time.Second}, "upstream: OpenFor -1s is negative"},
		{Config{Target: ok, MaxIdleConns: -1}, "upstream: MaxIdleConns -1 is negative"},
	} {
		_, err := New(tc.cfg)
		if assert.Error(t, err) {
			assert.True(t, strings.HasPrefix(err.Error(), tc.want), "%q, want %q", err, tc.want)
		}
	}
}

func TestStateStrings(t *testing.T) {
	assert.Equal(t, "closed", Closed.String())
	assert.Equal(t, "half-open", HalfOpen.String())
	assert.Equal(t, "open", Open.String())
	assert.Equal(t, "State(7)", State(7).String())
}

// The Proxy's answers carry Retry-After in whole seconds, singular at one.
func TestWriteJSON(t *testing.T) {
	for _, tc := range []struct {
		wait      time.Duration
		header    string
		message   string
		hasRetry  bool
		retryJSON int64
	}{
		{0, "", "Down.", false, 0},
		{300 * time.Millisecond, "1", "Down. Please retry after 1 second.", true, 1},
		{4200 * time.Millisecond, "5", "Down. Please retry after 5 seconds.", true, 5},
	} {
		w := httptest.NewRecorder()
		writeJSON(w, http.StatusServiceUnavailable, CodeUnavailable, "Down.", tc.wait)
		assert.Equal(t, tc.header, w.Header().Get("Retry-After"))
		var a answer
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
		assert.Equal(t, answer{Error: CodeUnavailable, Message: tc.message, RetryAfter: tc.retryJSON}, a)
		assert.Equal(t, tc.hasRetry, strings.Contains(w.Body.String(), "retry_after"))
	}
}

// A client that sends its body too slowly (a slowloris on the body) is cut
// off by the server's ReadTimeout; that is the client's doing, and the
// breaker does not count it against the upstream.
func TestSlowClientBodyIsNotTheUpstreamsFault(t *testing.T) {
	var read atomic.Int64
	hs := newHarness(t, Config{Failures: 1}, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		read.Add(n)
	})
	slow := httptest.NewUnstartedServer(hs.proxy)
	slow.Config.ReadTimeout = 200 * time.Millisecond
	slow.Start()
	defer slow.Close()

	conn, err := net.Dial("tcp", slow.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(hang)))
	got, err := io.ReadAll(conn) // the rest of the body never comes
	require.NoError(t, err, "the server closed the connection, rather than the test's deadline passing")
	if len(got) > 0 {
		assert.Contains(t, string(got), "408 Request Timeout")
	}
	require.Eventually(t, func() bool { return hs.proxy.Stats().Forwarded == 1 }, hang, 5*time.Millisecond)
	assert.Zero(t, hs.proxy.Stats().Failures)
	assert.Equal(t, Closed, hs.proxy.State())
	assert.LessOrEqual(t, read.Load(), int64(10))
}
