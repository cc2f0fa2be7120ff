// Package replay replays access logs through rules before they are
// enforced: yesterday's traffic through today's rules, or through a
// proposed change, to learn who would have been limited, when, by which
// rule, and what changes between two rules files.
//
// Each request of the log goes through the HTTP middleware itself (package
// middleware: the same planning, checks, shadow mode, ban list and penalty
// as the gateway), on a LocalOnly limiter whose clock is the log's: a
// simulated clock, so a day of traffic replays in seconds, and the same log
// always gives the same answer. The counts it keeps grow with the clients
// and rules seen, not with the length of the log.
//
// What it cannot know from a log, it says: a log gives its times to the
// second (the Common and Combined formats) or to its fraction of a second,
// and the requests logged within one such instant are spread evenly over
// it, in the order logged; a fleet's nodes each limit with the whole rules
// in LocalOnly, as one node would, so a replay tells what one limiter
// holding the whole limit (Sync mode, or Async's bound) would do.
package replay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/accesslog"
	"github.com/hybridlimit/hybridlimit/middleware"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Rules are one rules file to replay through.
type Rules struct {
	// Name names them in the report: the file's name.
	Name string
	// Rules are the compiled rules.
	Rules *rules.Rules
}

// Config configures a Replay. Rules is required.
type Config struct {
	// Rules are the rules replayed through, one or two: a second is
	// compared with the first (Report.Changes).
	Rules []Rules
	// Middleware says how the middleware plans requests: its IP (the
	// trusted proxies) and Client (the keying), and Cost and Priority,
	// as the gateway or service being replayed has them. Its Limiter,
	// Rules, Observer, OnDenied, OnError and Logger are the replay's own;
	// User and Tier, when nil, read the log's user and tier fields.
	Middleware middleware.Config
	// APIKeyHeader is the header a logged API key is sent in, where the
	// keying reads it. Zero means "X-API-Key".
	APIKeyHeader string
	// Top is how many clients the report names. Zero means 10.
	Top int
	// MaxKeys bounds the keys each run's limiter holds; zero means the
	// limiter's default (1,048,576). A log with more keys active at once
	// than this is replayed with the limiter's evictions, as a gateway
	// with that MaxKeys would have run it.
	MaxKeys int
	// Exact turns off the spreading of requests logged in one instant
	// over the log's resolution: they are replayed at that instant, all
	// at once.
	Exact bool
}

// Replay replays requests through the rules. It is not safe for concurrent
// use. Make one with New, give it the log's entries in time order with
// Add, and take the report with Finish.
type Replay struct {
	cfg     Config
	runs    []*run
	changes changeAcc
	group   []accesslog.Entry // entries logged in one instant, not replayed yet
	from    time.Time
	to      time.Time
	n       int64
	states  []state
	closed  bool
}

type ctxKey int

const (
	userKey ctxKey = iota
	tierKey
)

// New returns a Replay configured by cfg, or what is wrong with cfg.
func New(cfg Config) (*Replay, error) {
	if len(cfg.Rules) == 0 || len(cfg.Rules) > 2 {
		return nil, fmt.Errorf("replay: %d rules files; want one, or two to compare", len(cfg.Rules))
	}
	for _, r := range cfg.Rules {
		if r.Rules == nil {
			return nil, fmt.Errorf("replay: rules %q are nil", r.Name)
		}
	}
	if cfg.APIKeyHeader == "" {
		cfg.APIKeyHeader = "X-API-Key"
	}
	if cfg.Top == 0 {
		cfg.Top = 10
	}
	if cfg.Top < 0 || cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("replay: Top %d and MaxKeys %d must not be negative", cfg.Top, cfg.MaxKeys)
	}
	if cfg.Middleware.User == nil {
		cfg.Middleware.User = func(ctx context.Context) (string, bool) {
			u, _ := ctx.Value(userKey).(string)
			return u, u != ""
		}
	}
	if cfg.Middleware.Tier == nil {
		cfg.Middleware.Tier = func(r *http.Request) string {
			t, _ := r.Context().Value(tierKey).(string)
			return t
		}
	}
	if _, err := middleware.NewPlanner(cfg.Middleware); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	r := &Replay{cfg: cfg, states: make([]state, len(cfg.Rules))}
	r.changes.init()
	return r, nil
}

// Add replays e, a request of the log. Entries come in time order; one
// earlier than the one before it is replayed at the later time (the
// limiter's clock never goes back). Requests logged in one instant are
// held until the log moves past it, then spread over it.
func (r *Replay) Add(e accesslog.Entry) error {
	if r.closed {
		return errors.New("replay: Add after Finish")
	}
	if len(r.group) > 0 && !e.Time.Equal(r.group[0].Time) {
		if err := r.flush(); err != nil {
			return err
		}
	}
	r.group = append(r.group, e)
	return nil
}

// flush replays the entries of one instant, spread evenly over its
// resolution.
func (r *Replay) flush() error {
	k := len(r.group)
	for i, e := range r.group {
		t := e.Time
		if !r.cfg.Exact && k > 1 && e.Resolution > 0 {
			t = t.Add(time.Duration(int64(e.Resolution) / int64(k) * int64(i)))
		}
		if err := r.replay(e, t); err != nil {
			return err
		}
	}
	clear(r.group)
	r.group = r.group[:0]
	return nil
}

// replay sends e through every run at t.
func (r *Replay) replay(e accesslog.Entry, t time.Time) error {
	if r.runs == nil {
		for _, rs := range r.cfg.Rules {
			run, err := newRun(rs.Rules, r.cfg.Middleware, t, r.cfg.MaxKeys)
			if err != nil {
				r.closeRuns()
				return fmt.Errorf("replay: %w", err)
			}
			r.runs = append(r.runs, run)
		}
		r.from = t
	}
	r.n++
	r.to = t
	req := r.request(e)
	for i, run := range r.runs {
		r.states[i] = run.serve(req, t)
	}
	if len(r.runs) == 2 {
		r.changes.add(r.runs, r.states, e, t)
	}
	return nil
}

// request is the HTTP request e logged, as the server received it.
func (r *Replay) request(e accesslog.Entry) *http.Request {
	u, err := url.ParseRequestURI(e.Target)
	if err != nil {
		// A target net/http would have refused: the path as logged, up to
		// any query.
		path, _, _ := strings.Cut(e.Target, "?")
		u = &url.URL{Path: path}
	}
	req := &http.Request{Method: e.Method, URL: u, RequestURI: e.Target, RemoteAddr: e.RemoteAddr, Header: http.Header{},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if e.ForwardedFor != "" {
		req.Header["X-Forwarded-For"] = []string{e.ForwardedFor}
	}
	if e.APIKey != "" {
		req.Header.Set(r.cfg.APIKeyHeader, e.APIKey)
	}
	if e.User == "" && e.Tier == "" {
		return req // its Context is Background
	}
	ctx := context.Background()
	if e.User != "" {
		ctx = context.WithValue(ctx, userKey, e.User)
	}
	if e.Tier != "" {
		ctx = context.WithValue(ctx, tierKey, e.Tier)
	}
	return req.WithContext(ctx)
}

// Finish replays what is held, stops the runs' limiters and returns the
// report: Lines and Malformed are the caller's to fill, from its readers.
func (r *Replay) Finish() (Report, error) {
	if r.closed {
		return Report{}, errors.New("replay: Finish twice")
	}
	err := r.flush()
	defer r.closeRuns()
	rep := Report{From: r.from, To: r.to, Requests: r.n}
	for i, run := range r.runs {
		rep.Runs = append(rep.Runs, run.acc.report(r.cfg.Rules[i].Name, r.cfg.Top))
	}
	if r.runs == nil { // nothing replayed: the runs' reports, empty
		for _, rs := range r.cfg.Rules {
			var a accumulator
			a.init()
			rep.Runs = append(rep.Runs, a.report(rs.Name, r.cfg.Top))
		}
	}
	if len(r.cfg.Rules) == 2 {
		c := r.changes.report(r.cfg.Top)
		rep.Changes = &c
	}
	return rep, err
}

// closeRuns stops the runs' limiters.
func (r *Replay) closeRuns() {
	r.closed = true
	for _, run := range r.runs {
		run.close()
	}
}
