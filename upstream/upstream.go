// Package upstream forwards HTTP requests to one upstream service, guarded
// the way a production gateway guards it: timeouts on every step, a limit on
// request bodies, and a circuit breaker (sony/gobreaker) in front.
//
// A rate limiter and a circuit breaker answer different questions, and so
// different codes: the limiter in front of a Proxy answers 429 to a client
// that asks too much; the Proxy's breaker answers 503 when the service
// behind it is failing. While the upstream fails (connection errors,
// timeouts, and by default 502, 503 and 504 answers), the breaker opens
// after Config.Failures consecutive failures; while it is open every request
// is answered 503 Service Unavailable at once, with Retry-After, instead of
// piling onto a service that cannot answer. After Config.OpenFor the breaker
// is half-open: Config.Probes requests go through as probes, and their
// success closes it (one failure reopens it). Every transition is logged
// once and counted (Stats), outside the breaker's lock.
//
// Every answer the Proxy writes itself is JSON, in the shape the middleware
// package uses:
//
//	503 {"error":"upstream_unavailable","message":"...","retry_after":5}   breaker open
//	502 {"error":"bad_gateway","message":"..."}                           the upstream could not be reached
//	504 {"error":"gateway_timeout","message":"..."}                       it did not answer in time
//	413 {"error":"request_too_large","message":"..."}                     the body is over Config.MaxBodyBytes
//	408 {"error":"request_timeout","message":"..."}                       the client's body stopped coming
//
// What counts against the upstream: a failed connection, a timeout, a
// failure status (Config.FailureStatus), a response body cut off by the
// upstream. What does not: a client that goes away or sends its body too
// slowly, a body over the limit, any status the upstream chose to answer with that is not a failure
// status.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// State is the breaker's state.
type State int32

// The breaker's states.
const (
	// Closed: requests go to the upstream.
	Closed State = iota
	// HalfOpen: Config.Probes requests go through as probes; the others are
	// answered 503.
	HalfOpen
	// Open: every request is answered 503 until Config.OpenFor has passed.
	Open
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Defaults for Config's zero fields.
const (
	DefaultDialTimeout           = 5 * time.Second
	DefaultResponseHeaderTimeout = 30 * time.Second
	DefaultTimeout               = 60 * time.Second
	DefaultIdleConnTimeout       = 90 * time.Second
	DefaultMaxIdleConns          = 256
	DefaultMaxBodyBytes          = 10 << 20 // 10 MiB
	DefaultFailures              = 5
	DefaultOpenFor               = 5 * time.Second
	DefaultProbes                = 1
)

// The "error" codes of the JSON answers a Proxy writes.
const (
	CodeUnavailable = "upstream_unavailable"
	CodeBadGateway  = "bad_gateway"
	CodeTimeout     = "gateway_timeout"
	CodeTooLarge    = "request_too_large"
	// CodeClientTimeout is the 408's code: the client's body came too
	// slowly, or not at all.
	CodeClientTimeout = "request_timeout"
)

// Config configures a Proxy. Target is required; every other zero field
// means its default. Durations may be negative to turn that timeout off.
type Config struct {
	// Target is the upstream: scheme and host, and a path prefix if any
	// (requests' paths are joined to it, as httputil.NewSingleHostReverseProxy
	// does). The request's Host header is passed on unchanged and the
	// client's address is appended to X-Forwarded-For.
	Target *url.URL

	// DialTimeout bounds connecting to the upstream, and the TLS handshake
	// after it. Zero means DefaultDialTimeout (5 s).
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is sent. Zero means 30 s.
	ResponseHeaderTimeout time.Duration
	// Timeout bounds the whole exchange with the upstream, from the
	// request's arrival to the last byte of the response body: a response
	// still streaming then is cut off. Keep it below the server's
	// WriteTimeout, or the client is cut off first. Zero means 60 s.
	Timeout time.Duration
	// IdleConnTimeout is how long an idle keep-alive connection to the
	// upstream is kept. Zero means 90 s.
	IdleConnTimeout time.Duration
	// MaxIdleConns bounds the idle connections kept to the upstream (Go's
	// default of 2 per host makes a busy proxy open and close connections
	// all the time). Zero means 256.
	MaxIdleConns int

	// MaxBodyBytes bounds request bodies: a request that declares a longer
	// Content-Length is answered 413 without being forwarded; a chunked
	// body is cut when it passes the limit, and answered 413 if the
	// upstream has not answered yet. Zero means 10 MiB; negative, no limit.
	MaxBodyBytes int64

	// Failures is how many consecutive failures open the breaker. Zero
	// means 5.
	Failures uint32
	// OpenFor is how long the breaker stays open before it lets probes
	// through. Zero means 5 s.
	OpenFor time.Duration
	// Probes is how many requests a half-open breaker lets through; as
	// many successes close it. Zero means 1.
	Probes uint32
	// FailureStatus reports the response statuses that count as the
	// upstream failing. The answer is passed to the client either way.
	// Nil means 502, 503 and 504: the upstream (or a proxy of its own)
	// saying it cannot serve. A 500 is often one request's bug rather than
	// a service down; count it with a function of your own.
	FailureStatus func(status int) bool

	// OnStateChange, if set, is told of every breaker transition, after it
	// is logged, outside every lock, on the goroutine of the request that
	// caused it.
	OnStateChange func(from, to State)
	// Logger receives the breaker's transitions and each failed request
	// (a warning with the error, the method and the path; while the breaker
	// is open nothing is forwarded, so nothing more fails). Nil means
	// slog.Default().
	Logger *slog.Logger

	// Transport, if set, replaces the http.Transport the Proxy builds from
	// the timeouts above (which then do not apply, except Timeout).
	Transport http.RoundTripper
}

// withDefaults checks c and fills its zero fields.
func (c Config) withDefaults() (Config, error) {
	if c.Target == nil || c.Target.Scheme == "" || c.Target.Host == "" {
		return c, fmt.Errorf("upstream: target %v: want an absolute URL such as http://127.0.0.1:9000", c.Target)
	}
	if c.Target.Scheme != "http" && c.Target.Scheme != "https" {
		return c, fmt.Errorf("upstream: target %v: scheme %q, want http or https", c.Target, c.Target.Scheme)
	}
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0 // off
		}
	}
	def(&c.DialTimeout, DefaultDialTimeout)
	def(&c.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	def(&c.Timeout, DefaultTimeout)
	def(&c.IdleConnTimeout, DefaultIdleConnTimeout)
	if c.OpenFor < 0 {
		return c, fmt.Errorf("upstream: OpenFor %v is negative", c.OpenFor)
	}
	if c.OpenFor == 0 {
		c.OpenFor = DefaultOpenFor
	}
	if c.MaxIdleConns < 0 {
		return c, fmt.Errorf("upstream: MaxIdleConns %d is negative", c.MaxIdleConns)
	}
	if c.MaxIdleConns == 0 {
		c.MaxIdleConns = DefaultMaxIdleConns
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Failures == 0 {
		c.Failures = DefaultFailures
	}
	if c.Probes == 0 {
		c.Probes = DefaultProbes
	}
	if c.FailureStatus == nil {
		c.FailureStatus = func(s int) bool {
			return s == http.StatusBadGateway || s == http.StatusServiceUnavailable || s == http.StatusGatewayTimeout
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Stats counts what a Proxy did since it was made.
type Stats struct {
	// State is the breaker's state as of its last transition.
	State State
	// Forwarded counts requests sent to the upstream.
	Forwarded uint64
	// Failures counts forwarded requests that failed (Timeouts included).
	Failures uint64
	// Timeouts counts failures that were the upstream not answering in
	// time.
	Timeouts uint64
	// Rejected counts requests answered 503 by the breaker without being
	// forwarded.
	Rejected uint64
	// TooLarge counts requests answered 413.
	TooLarge uint64
	// Transitions counts the breaker's transitions by the state entered,
	// indexed by State: Transitions[Open] is how often it opened.
	Transitions [3]uint64
}

// Proxy is an http.Handler that forwards every request to the upstream
// through the breaker. It is safe for concurrent use.
type Proxy struct {
	cfg Config
	cb  *gobreaker.TwoStepCircuitBreaker[struct{}]
	rp  *httputil.ReverseProxy
	tr  *http.Transport // nil when Config.Transport was given

	state       atomic.Int32
	openedAt    atomic.Int64 // Unix ns of the last transition to Open
	lastFailure atomic.Pointer[string]

	forwarded, failures, timeouts, rejected, tooLarge atomic.Uint64
	transitions                                       [3]atomic.Uint64

	mu      sync.Mutex // guards pending
	pending []transition
}

type transition struct {
	from, to State
	at       time.Time
}

// New returns a Proxy with a closed breaker.
func New(cfg Config) (*Proxy, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg}
	failures := cfg.Failures
	p.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "upstream " + cfg.Target.Host,
		MaxRequests: cfg.Probes,
		Timeout:     cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsExcluded:  func(err error) bool { return errors.Is(err, errExcluded) },
		// Under gobreaker's lock: atomics and a short lock of our own, never
		// a call back into the breaker; flush logs and calls out later.
		OnStateChange: func(_ string, from, to gobreaker.State) {
			f, t := fromGobreaker(from), fromGobreaker(to)
			now := time.Now()
			p.state.Store(int32(t))
			p.transitions[t].Add(1)
			if t == Open {
				p.openedAt.Store(now.UnixNano())
			}
			p.mu.Lock()
			p.pending = append(p.pending, transition{f, t, now})
			p.mu.Unlock()
		},
	})
	rt := cfg.Transport
	if rt == nil {
		dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
		p.tr = &http.Transport{
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   cfg.DialTimeout,
			ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
			IdleConnTimeout:       cfg.IdleConnTimeout,
			MaxIdleConns:          cfg.MaxIdleConns,
			MaxIdleConnsPerHost:   cfg.MaxIdleConns,
			ExpectContinueTimeout: time.Second,
			ForceAttemptHTTP2:     true,
		}
		rt = p.tr
	}
	p.rp = httputil.NewSingleHostReverseProxy(cfg.Target)
	p.rp.Transport = rt
	p.rp.ErrorLog = slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)
	p.rp.ModifyResponse = p.modifyResponse
	p.rp.ErrorHandler = p.errorHandler
	return p, nil
}

func fromGobreaker(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return Open
	case gobreaker.StateHalfOpen:
		return HalfOpen
	}
	return Closed
}

// errExcluded marks an exchange that says nothing about the upstream.
var errExcluded = errors.New("upstream: not the upstream's doing")

// exchange is what one forwarded request found out, filled in by the
// reverse proxy's hooks.
type exchange struct {
	status  int   // the upstream's status, 0 if none came
	err     error // the transport's error, nil if none
	bodyErr error // an error reading the upstream's response body
	// clientErr is an error reading the client's request body (too long,
	// too slow, cut off), set from the transport's goroutine.
	clientErr atomic.Pointer[error]
}

// clientFault returns the error reading the client's body, or nil.
func (ex *exchange) clientFault() error {
	if e := ex.clientErr.Load(); e != nil {
		return *e
	}
	return nil
}

type exchangeKey struct{}

// ServeHTTP forwards r to the upstream, or answers it: 503 while the
// breaker is open, 413 for a body over the limit, 502 or 504 when the
// upstream fails.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if limit := p.cfg.MaxBodyBytes; limit > 0 && r.ContentLength > limit {
		p.tooLarge.Add(1)
		w.Header().Set("Connection", "close") // the body is not read: do not reuse the connection
		writeJSON(w, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("The request body is longer than %d bytes.", limit), 0)
		return
	}
	ex := &exchange{}
	if r.Body != nil && r.Body != http.NoBody {
		if limit := p.cfg.MaxBodyBytes; limit > 0 {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		r.Body = &clientBody{ReadCloser: r.Body, ex: ex}
	}
	done, err := p.cb.Allow()
	p.flush()
	if err != nil {
		p.rejected.Add(1)
		wait := time.Second // half-open, its probes in flight: soon
		if p.State() == Open {
			wait = p.probeIn(time.Now())
		}
		writeJSON(w, http.StatusServiceUnavailable, CodeUnavailable, "The upstream service is failing.", wait)
		return
	}
	p.forwarded.Add(1)
	ctx := context.WithValue(r.Context(), exchangeKey{}, ex)
	cancel := context.CancelFunc(func() {})
	if p.cfg.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, p.cfg.Timeout)
	}
	defer func() {
		v := recover()
		cancel()
		done(p.verdict(ctx, r, ex, v != nil))
		p.flush()
		if v != nil {
			panic(v) // http.ErrAbortHandler: the response was cut off mid-body
		}
	}()
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// verdict is what the exchange tells the breaker: nil for a success, an
// error for a failure (counted, logged and remembered), errExcluded for
// neither. ctx is the exchange's (r's, with the Proxy's deadline).
func (p *Proxy) verdict(ctx context.Context, r *http.Request, ex *exchange, aborted bool) error {
	clientGone := r.Context().Err() != nil
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) && !clientGone
	var fail error
	switch {
	case ex.err != nil:
		switch {
		case ex.clientFault() != nil:
			return errExcluded // the client's body failed: too long, too slow, cut off
		case clientGone:
			return errExcluded
		case timedOut || isTimeout(ex.err):
			fail = fmt.Errorf("no answer in time: %w", ex.err)
			p.timeouts.Add(1)
		default:
			fail = ex.err
		}
	case aborted || ex.bodyErr != nil:
		// The response was cut off after its headers: the upstream's doing
		// only if reading from it failed, or its deadline passed.
		switch {
		case timedOut:
			fail = fmt.Errorf("response body cut off at the %v timeout", p.cfg.Timeout)
			p.timeouts.Add(1)
		case ex.bodyErr != nil && !clientGone:
			fail = fmt.Errorf("reading the response body: %w", ex.bodyErr)
		default:
			return errExcluded
		}
	case p.cfg.FailureStatus(ex.status):
		fail = fmt.Errorf("answered %d %s", ex.status, http.StatusText(ex.status))
	default:
		return nil
	}
	p.failures.Add(1)
	msg := fail.Error()
	p.lastFailure.Store(&msg)
	p.cfg.Logger.Warn("upstream request failed", "upstream", p.cfg.Target.String(), "method", r.Method, "path", r.URL.Path, "err", msg)
	return fail
}

// modifyResponse notes the upstream's status and watches its body.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	if ex, ok := resp.Request.Context().Value(exchangeKey{}).(*exchange); ok {
		ex.status = resp.StatusCode
		resp.Body = &watchedBody{ReadCloser: resp.Body, ex: ex}
	}
	return nil
}

// errorHandler answers a request the upstream did not: 413 for a body over
// the limit, 504 for a timeout, 502 otherwise.
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if ex, ok := r.Context().Value(exchangeKey{}).(*exchange); ok {
		ex.err = err
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		p.tooLarge.Add(1)
		writeJSON(w, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("The request body is longer than %d bytes.", tooLarge.Limit), 0)
	case isClientFault(r):
		// The client sent its body too slowly (the server's ReadTimeout)
		// or broke off: it is probably gone, but answer in case it is not.
		writeJSON(w, http.StatusRequestTimeout, CodeClientTimeout, "The request body did not arrive in time.", 0)
	case errors.Is(r.Context().Err(), context.DeadlineExceeded) || isTimeout(err):
		writeJSON(w, http.StatusGatewayTimeout, CodeTimeout, "The upstream service did not answer in time.", 0)
	default:
		writeJSON(w, http.StatusBadGateway, CodeBadGateway, "The upstream service could not be reached.", 0)
	}
}

// isClientFault reports whether reading r's body failed.
func isClientFault(r *http.Request) bool {
	ex, ok := r.Context().Value(exchangeKey{}).(*exchange)
	return ok && ex.clientFault() != nil
}

// clientBody records an error reading the client's request body.
type clientBody struct {
	io.ReadCloser
	ex *exchange
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.ex.clientErr.CompareAndSwap(nil, &err)
	}
	return n, err
}

// isTimeout reports a network timeout (a dial, a response header wait).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// watchedBody records an error reading the upstream's response body.
type watchedBody struct {
	io.ReadCloser
	ex *exchange
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.ex.bodyErr == nil {
		b.ex.bodyErr = err
	}
	return n, err
}

// flush logs the transitions recorded since the last flush, and tells
// Config.OnStateChange, outside every lock.
func (p *Proxy) flush() {
	p.mu.Lock()
	pending := p.pending
	p.pending = nil
	p.mu.Unlock()
	for _, t := range pending {
		log := p.cfg.Logger.With("upstream", p.cfg.Target.String(), "from", t.from.String(), "to", t.to.String())
		switch t.to {
		case Open:
			last := ""
			if s := p.lastFailure.Load(); s != nil {
				last = *s
			}
			log.Warn("upstream breaker open: answering 503 without forwarding", "for", p.cfg.OpenFor, "last_failure", last)
		case HalfOpen:
			log.Info("upstream breaker half-open: probing the upstream", "probes", p.cfg.Probes)
		case Closed:
			log.Info("upstream breaker closed: the upstream answers again")
		}
		if p.cfg.OnStateChange != nil {
			p.cfg.OnStateChange(t.from, t.to)
		}
	}
}

// State returns the breaker's state. An open breaker whose OpenFor has
// passed turns half-open here, as on the next request.
func (p *Proxy) State() State {
	p.cb.State() // moves an expired open breaker to half-open
	p.flush()
	return State(p.state.Load())
}

// probeIn is how long until an open breaker lets probes through: at least a
// second, in whole seconds for Retry-After.
func (p *Proxy) probeIn(now time.Time) time.Duration {
	return max(time.Duration(p.openedAt.Load()+int64(p.cfg.OpenFor)-now.UnixNano()), time.Second)
}

// Stats returns the Proxy's counters.
func (p *Proxy) Stats() Stats {
	s := Stats{
		State:     p.State(),
		Forwarded: p.forwarded.Load(),
		Failures:  p.failures.Load(),
		Timeouts:  p.timeouts.Load(),
		Rejected:  p.rejected.Load(),
		TooLarge:  p.tooLarge.Load(),
	}
	for i := range s.Transitions {
		s.Transitions[i] = p.transitions[i].Load()
	}
	return s
}

// Close closes the idle connections to the upstream. Requests in flight are
// not interrupted; the Proxy stays usable.
func (p *Proxy) Close() {
	if p.tr != nil {
		p.tr.CloseIdleConnections()
	}
}

// answer is the JSON body of an answer the Proxy writes.
type answer struct {
	Error      string `json:"error"`
	Message    string `json:"message"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// writeJSON answers with status and a JSON body; a positive wait adds
// Retry-After, in whole seconds rounded up.
func writeJSON(w http.ResponseWriter, status int, code, msg string, wait time.Duration) {
	a := answer{Error: code, Message: msg}
	h := w.Header()
	if wait > 0 {
		a.RetryAfter = int64((wait + time.Second - 1) / time.Second)
		a.Message += " Please retry after " + strconv.FormatInt(a.RetryAfter, 10) + " seconds."
		if a.RetryAfter == 1 {
			a.Message = a.Message[:len(a.Message)-2] + "."
		}
		h.Set("Retry-After", strconv.FormatInt(a.RetryAfter, 10))
	}
	body, _ := json.Marshal(a) // two strings and an int: cannot fail
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a client gone away is not the Proxy's error
}
