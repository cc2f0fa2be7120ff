package replay

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/middleware"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// state is what one run did with one request.
type state uint8

// The states, from the client's side.
const (
	passed   state = iota // admitted
	limited               // answered 429
	shadowed              // admitted, but a shadow rule denied it: a 429 once enforced
	banned                // answered 403: the ban list or the penalty
	failed                // not checked: the middleware could not plan it
)

// run replays requests through one set of rules: the middleware itself, in
// front of a handler that does nothing, on a LocalOnly limiter whose clock
// is the log's.
type run struct {
	clk     *clock.Manual
	lim     *hybrid.Limiter
	handler http.Handler
	w       discard

	// What the middleware told of the request being served.
	checks  []observe.CheckEvent
	event   observe.RequestEvent
	retry   time.Duration // a denial's Retry-After
	failure error

	acc accumulator
}

// newRun starts a run of rs, planned as mw says (its Limiter, Rules,
// Observer, OnDenied, OnError and Logger are the run's own).
func newRun(rs *rules.Rules, mw middleware.Config, start time.Time, maxKeys int) (*run, error) {
	r := &run{clk: clock.NewManual(start), w: discard{h: http.Header{}}}
	r.acc.init()
	lim, err := hybrid.New(hybrid.Config{Clock: r.clk, MaxKeys: maxKeys})
	if err != nil {
		return nil, err
	}
	r.lim = lim
	mw.Limiter, mw.Rules, mw.Observer = lim, rules.Static(rs), r
	mw.OnDenied = func(_ http.ResponseWriter, _ *http.Request, d middleware.Denial) { r.retry = d.RetryAfter }
	mw.OnError = func(_ http.ResponseWriter, _ *http.Request, err error) { r.failure = err }
	h, err := middleware.New(mw)
	if err != nil {
		_ = lim.Close(context.Background())
		return nil, err
	}
	r.handler = h(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	return r, nil
}

// ObserveCheck and ObserveRequest make the run the middleware's observer.
func (r *run) ObserveCheck(e observe.CheckEvent)     { r.checks = append(r.checks, e) }
func (r *run) ObserveRequest(e observe.RequestEvent) { r.event = e }

// serve replays req at t and accounts for what the middleware did with it.
func (r *run) serve(req *http.Request, t time.Time) state {
	if t.After(r.clk.Now()) {
		r.clk.Set(t)
	}
	r.checks, r.retry, r.failure, r.event = r.checks[:0], 0, nil, observe.RequestEvent{}
	clear(r.w.h)
	r.handler.ServeHTTP(&r.w, req)
	return r.acc.add(r, r.clk.Now())
}

// close stops the run's limiter.
func (r *run) close() {
	_ = r.lim.Close(context.Background())
}

// stateOf reads the run's request as a state, with the rule that answered
// and the Retry-After the client saw (or would see, once a shadow rule is
// enforced).
func (r *run) stateOf() (state, string, time.Duration) {
	switch r.event.Outcome {
	case observe.Passed:
		return passed, "", 0
	case observe.Limited:
		return limited, r.event.Rule, r.retry
	case observe.ShadowLimited:
		for _, c := range r.checks {
			if c.Rule == r.event.Rule && !c.Decision.Allowed {
				return shadowed, r.event.Rule, c.Decision.RetryAfter
			}
		}
		return shadowed, r.event.Rule, 0 // a shadowed ban or penalty
	case observe.Banned:
		return banned, r.event.Rule, r.retry
	}
	return failed, "", 0
}

// failureReason is why the run's request could not be checked.
func (r *run) failureReason() string {
	if r.failure == nil {
		return fmt.Sprintf("outcome %v", r.event.Outcome)
	}
	return r.failure.Error()
}

// ruleLimit is the limit and shadow flag a check of rule ran under.
type ruleLimit struct {
	lim    limit.Limit
	shadow bool
}

// discard is a ResponseWriter that keeps nothing but the headers the
// middleware sets, cleared for each request.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}
