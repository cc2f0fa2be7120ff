package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// errNilRules is the failure of a Config.Rules that returned nil.
var errNilRules = errors.New("middleware: the rules source returned nil")

// New returns the middleware configured by cfg, or an error naming every
// mistake in cfg. The middleware wraps a handler; wrapping a nil handler
// panics, a programming error best caught at startup. The middleware and the
// handlers it returns are safe for concurrent use.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	planner, err := NewPlanner(cfg)
	if err != nil {
		return nil, err
	}
	m := &core{
		lim:        cfg.Limiter,
		rules:      cfg.Rules,
		planner:    planner,
		headers:    cfg.Headers,
		onError:    cfg.OnError,
		onDenied:   cfg.OnDenied,
		obs:        cfg.Observer,
		log:        cfg.Logger,
		failClosed: cfg.Limiter.Fallback() == hybrid.FailClosed,
	}
	m.penalties.maxClients = cfg.PenaltyClients
	if m.penalties.maxClients == 0 {
		m.penalties.maxClients = DefaultPenaltyClients
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.onError == nil {
		m.onError = m.defaultOnError
	}
	if m.onDenied == nil {
		m.onDenied = DefaultOnDenied
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("middleware: wrapping a nil http.Handler")
		}
		return &handler{m: m, next: next}
	}, nil
}

// core is the middleware's configuration and shared state, behind every
// handler it wraps.
type core struct {
	lim        *hybrid.Limiter
	rules      func() *rules.Rules
	planner    *Planner
	headers    Headers
	onError    func(http.ResponseWriter, *http.Request, error)
	onDenied   func(http.ResponseWriter, *http.Request, Denial)
	obs        observe.Observer
	log        *slog.Logger
	failClosed bool

	penalties penalties
	pool      scratchPool
	zones     limit.Zones // calendar limits' zones, for RateLimit-Policy
}

// handler is the middleware around one next handler.
type handler struct {
	m    *core
	next http.Handler
}

// verdict is what the middleware decided for a request.
type verdict struct {
	outcome observe.Outcome
	rule    string        // as RequestEvent.Rule
	client  string        // the client key, once known
	wait    time.Duration // Retry-After of a 429, 503 or penalty 403
	err     error         // why it Failed
	// The check that answered a Limited or Unavailable request, and its
	// decision.
	check    rules.Check
	decision hybrid.Decision
}

// ServeHTTP checks the request and then answers it or calls the next
// handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	var start time.Time
	if m.obs != nil {
		start = time.Now()
	}
	v := m.evaluate(w, r)
	if m.obs != nil {
		m.obs.ObserveRequest(observe.RequestEvent{Outcome: v.outcome, Rule: v.rule, Client: v.client, Latency: time.Since(start)})
	}
	switch v.outcome {
	case observe.Passed, observe.ShadowLimited:
		h.next.ServeHTTP(w, r)
	case observe.Limited, observe.Banned, observe.Unavailable:
		d := v.denial()
		if d.Outcome != observe.Banned || d.Rule == observe.RulePenalty {
			w.Header().Set(headerRetryAfter, strconv.FormatInt(retrySeconds(d.RetryAfter), 10))
		}
		m.onDenied(w, r, d)
	default:
		m.onError(w, r, v.err)
	}
}

// denial describes a Limited, Banned or Unavailable verdict for OnDenied.
func (v *verdict) denial() Denial {
	d := Denial{Outcome: v.outcome, Rule: v.rule, Client: v.client, RetryAfter: v.wait, Check: v.check, Decision: v.decision}
	switch {
	case v.outcome == observe.Limited:
		d.Status, d.Code = http.StatusTooManyRequests, CodeRateLimited
	case v.outcome == observe.Unavailable:
		d.Status, d.Code, d.Rule = http.StatusServiceUnavailable, CodeUnavailable, v.check.Rule
	case v.rule == observe.RulePenalty:
		d.Status, d.Code = http.StatusForbidden, CodePenalty
	default:
		d.Status, d.Code = http.StatusForbidden, CodeBanned
	}
	return d
}

// evaluate decides the request, and sets the rate-limit headers when the
// answer carries them.
func (m *core) evaluate(w http.ResponseWriter, r *http.Request) verdict {
	rs := m.rules()
	if rs == nil {
		return verdict{outcome: observe.Failed, err: errNilRules}
	}
	sc := m.pool.get(rs.MaxChecks())
	defer m.pool.put(sc)
	plan, err := m.planner.Plan(r, rs, sc.checks)
	client := plan.Request.Client
	if err != nil {
		return verdict{outcome: observe.Failed, client: client, err: err}
	}
	if !plan.Enabled {
		return verdict{outcome: observe.Passed}
	}
	sc.checks = plan.Checks
	shadow := rs.Shadow()
	if plan.Banned {
		if shadow {
			return verdict{outcome: observe.ShadowLimited, rule: observe.RuleBan, client: client}
		}
		return verdict{outcome: observe.Banned, rule: observe.RuleBan, client: client}
	}
	now := m.lim.Now()
	pen, err := m.penalties.get(rs)
	if err != nil {
		return verdict{outcome: observe.Failed, client: client, err: err}
	}
	if pen != nil {
		if wait, blocked := pen.Blocked(client, now); blocked {
			if shadow {
				return verdict{outcome: observe.ShadowLimited, rule: observe.RulePenalty, client: client}
			}
			return verdict{outcome: observe.Banned, rule: observe.RulePenalty, client: client, wait: wait}
		}
	}
	v := m.check(r.Context(), w.Header(), sc, plan.Cost, now)
	v.client = client
	if pen != nil && (v.outcome == observe.Limited || shadow && v.outcome == observe.ShadowLimited) {
		pen.Strike(client, now)
	}
	return v
}

// check runs the planned checks in order until a live one denies the
// request, and sets the headers of an admitted or limited request.
func (m *core) check(ctx context.Context, h http.Header, sc *scratch, cost int64, now time.Time) verdict {
	checks := sc.checks
	ds := sc.decisions(len(checks))
	show, shadowRule := -1, ""
	for i, c := range checks {
		var t0 time.Time
		if m.obs != nil {
			t0 = time.Now()
		}
		d, err := m.lim.AllowN(ctx, c.Key, c.Limit, cost)
		if err != nil {
			if c.Shadow {
				m.log.Warn("middleware: shadow check skipped", "rule", c.Rule, "err", err)
				continue
			}
			return verdict{outcome: observe.Failed, err: fmt.Errorf("middleware: check %q: %w", c.Rule, err)}
		}
		ds[i] = d
		if m.obs != nil {
			m.obs.ObserveCheck(observe.CheckEvent{Rule: c.Rule, Decision: d, Shadow: c.Shadow, Latency: time.Since(t0)})
		}
		switch {
		case c.Shadow:
			if !d.Allowed && shadowRule == "" {
				shadowRule = c.Rule
			}
		case d.Allowed:
			if show < 0 || tighter(d, c, ds[show], checks[show]) {
				show = i
			}
		case m.failClosed && d.Source == hybrid.Degraded:
			return verdict{outcome: observe.Unavailable, wait: d.RetryAfter, check: c, decision: d}
		default:
			sc.buf = setHeaders(h, m.headers, checks, ds, i, true, d.RetryAfter, now, &m.zones, sc.buf)
			return verdict{outcome: observe.Limited, rule: c.Rule, wait: d.RetryAfter, check: c, decision: d}
		}
	}
	if show >= 0 {
		sc.buf = setHeaders(h, m.headers, checks, ds, show, false, 0, now, &m.zones, sc.buf)
	}
	if shadowRule != "" {
		return verdict{outcome: observe.ShadowLimited, rule: shadowRule}
	}
	return verdict{outcome: observe.Passed}
}

// defaultOnError is DefaultOnError, logging the 500s.
func (m *core) defaultOnError(w http.ResponseWriter, r *http.Request, err error) {
	if !errors.Is(err, httpkey.ErrMalformed) {
		m.log.Error("middleware: request not rate limited", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	DefaultOnError(w, r, err)
}

// cleanPath is the path rules match: r.URL.Path cleaned, so that
// "/api//v1/./search" is "/api/v1/search". path.Clean returns a clean path
// as it is, without allocating.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	return path.Clean(p)
}
