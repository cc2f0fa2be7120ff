package fleetcheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/limit"
)

// Result is what the checks found in one record.
type Result struct {
	Scenario *Scenario
	// Series is how many (key, limit) pairs were held to the bound, and
	// Windows how many window positions that examined.
	Series, Windows int
	// Worst is the largest excess over the bound in the run (negative: the
	// closest any window came to it); WorstBy the same per shape (the key's
	// pattern, or "multi-limit" for a key under several limits), and
	// WorstSingle among keys under one limit.
	Worst, WorstSingle Excess
	WorstBy            map[string]Excess
	// Compliant is how many decisions on compliant traffic were checked,
	// and Refused how many of them refused it; CompliantBy the decisions
	// checked by the stream's route (Key.Route), and Excluded the
	// decisions of compliant streams (and the admissions the bound's
	// windows) left out, by why.
	Compliant, Refused    int
	CompliantBy, Excluded map[string]int
	// NotConforming names the compliant streams that, as the driver
	// delivered them, stopped conforming: they are checked up to there.
	NotConforming []string
	// LedgerChecked and LedgerUnknown count the records of spend compared
	// with what was admitted, and those Redis's state cannot tell.
	LedgerChecked, LedgerUnknown int
	// RefusedInFault counts the Async refusals of compliant traffic that
	// waited for Redis while it was failing (from the fault to recoverySpan
	// after it healed): outside the promise, which holds with Redis
	// healthy, and reported apart.
	RefusedInFault int
	// OverForgotten counts the churning keys over the bound in a run whose
	// nodes forgot evictions (MaxKeys below the keys active within a
	// refill time): the limiter's documented, counted cost, reported apart.
	OverForgotten int
	// RTT is the round-trip allowance the bound was given (Record.Params).
	RTT        time.Duration
	Violations []Violation
}

// Excess is the worst window of one series against its bound.
type Excess struct {
	Excess   float64 // Admitted − Bound: above zero is a violation
	Admitted int64
	Bound    float64
	W, At    time.Duration
	Key      string
	Limit    limit.Limit
	Shape    string // the key's pattern, or "multi-limit"
	Seed     int64
	Valid    bool // something was measured
}

// String describes the excess on one line, with its key, limit, window and
// seed.
func (e Excess) String() string {
	if !e.Valid {
		return "none measured"
	}
	return fmt.Sprintf("%+.1f (%d admitted, bound %.1f, %.2fx) on %s [%v, %v] over %v at %v, seed %d",
		e.Excess, e.Admitted, e.Bound, float64(e.Admitted)/e.Bound, e.Key, e.Limit, e.Shape, e.W, e.At.Round(time.Millisecond), e.Seed)
}

// worse reports whether e is a larger excess than o.
func (e Excess) worse(o Excess) bool { return e.Valid && (!o.Valid || e.Excess > o.Excess) }

// Violation is one way a run broke a promise.
type Violation struct {
	Kind string // "bound", "refusal", "ledger", "error", "recovery", "start", "close"
	What string
}

// String is the violation's kind and what happened.
func (v Violation) String() string { return v.Kind + ": " + v.What }

// Failed reports whether the run broke any promise.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// ReplayCommand is the one line that replays seed.
func ReplayCommand(seed int64) string {
	return fmt.Sprintf("go test ./internal/fleetcheck -run TestReplay -seed=%d -v", seed)
}

// Summary describes the result: a line of figures, then each violation,
// the seed and the command that replays it.
func (r *Result) Summary() string {
	var b strings.Builder
	verdict := "ok"
	if r.Failed() {
		verdict = fmt.Sprintf("FAILED (%d violations)", len(r.Violations))
	}
	fmt.Fprintf(&b, "%s\n  %s: %d series, %d windows, worst excess %v; compliant refused %d of %d (%d more waited on a failing Redis); %d churning keys over the bound after forgotten evictions; ledger %d checked, %d unknown; round-trip allowance %v",
		r.Scenario, verdict, r.Series, r.Windows, r.Worst, r.Refused, r.Compliant, r.RefusedInFault, r.OverForgotten, r.LedgerChecked, r.LedgerUnknown, r.RTT.Round(time.Millisecond))
	for _, s := range r.NotConforming {
		fmt.Fprintf(&b, "\n  note: %s", s)
	}
	const show = 12
	for i, v := range r.Violations {
		if i == show {
			fmt.Fprintf(&b, "\n  ... and %d more", len(r.Violations)-show)
			break
		}
		fmt.Fprintf(&b, "\n  %v", v)
	}
	if r.Failed() {
		fmt.Fprintf(&b, "\n  replay: %s", ReplayCommand(r.Scenario.Seed))
	}
	return b.String()
}

// Check holds rec to every promise: the bound over every window of every
// length that matters, no refusal of compliant traffic, Redis's record of
// spend after quiescence, no unexpected error, every node started, recovered
// and closed (reporting all it spent: nodes close while Redis is up).
func Check(rec *Record) *Result {
	sc := rec.Scenario
	res := &Result{Scenario: sc, WorstBy: map[string]Excess{}, RTT: rec.rtt(), CompliantBy: map[string]int{}, Excluded: map[string]int{}}
	for i, n := range rec.Nodes {
		if n.StartErr != nil {
			res.violate("start", "node %d: %v", i, n.StartErr)
		}
		// Nodes close with Redis up (never during the fault): all they spent
		// must reach it.
		if n.CloseErr != nil {
			res.violate("close", "node %d: %v", i, n.CloseErr)
		}
	}
	if rec.Recovered != nil {
		res.violate("recovery", "%v", rec.Recovered)
	}

	// Decisions by series.
	series := make([][][]Decision, len(sc.Keys))
	for k := range sc.Keys {
		series[k] = make([][]Decision, len(sc.Keys[k].Limits))
	}
	for _, d := range rec.Decisions {
		series[d.Key][d.Limit] = append(series[d.Key][d.Limit], d)
	}
	errs := 0
	var firstErr string
	for k, key := range sc.Keys {
		for li, lim := range key.Limits {
			ds := series[k][li]
			if key.Pattern == Unsupported {
				for _, d := range ds {
					if !errors.Is(d.Err, hybrid.ErrUnsupported) {
						res.violate("error", "%s [%v] in %v mode: want ErrUnsupported, got allowed=%v err=%v", key.Name, lim, sc.Mode, d.Allowed, d.Err)
						break
					}
				}
				continue
			}
			for _, d := range ds {
				if d.Err != nil {
					if errs++; errs == 1 {
						firstErr = fmt.Sprintf("%s [%v] node %d at %v: %v", key.Name, lim, d.Node, d.At, d.Err)
					}
				}
			}
			res.bound(rec, k, li, ds)
			if key.Pattern == Compliant {
				res.compliance(rec, k, li, ds)
			}
		}
	}
	if errs > 0 {
		res.violate("error", "%d decisions returned an error; the first: %s", errs, firstErr)
	}
	res.ledger(rec)
	return res
}

func (r *Result) violate(kind, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Kind: kind, What: fmt.Sprintf(format, args...)})
}

// lengths are the window lengths that matter for lim in sc: one interval,
// the limit's period, one second and the whole run.
func lengths(sc *Scenario, lim limit.Limit) []time.Duration {
	ws := []time.Duration{lim.Period, time.Second, sc.Duration + time.Second}
	if sc.Interval > 0 {
		ws = append(ws, sc.Interval)
	}
	slices.Sort(ws)
	return slices.Compact(ws)
}

// Params returns the bound's parameters for limit li of key k in sc.
func (sc *Scenario) Params(k, li int) BoundParams {
	key, lim := sc.Keys[k], sc.Keys[k].Limits[li]
	p := BoundParams{Mode: sc.Mode, Algorithm: lim.Algorithm, Rate: lim.Rate, Period: lim.Period, Interval: sc.Interval,
		Nodes: len(sc.Nodes), MaxWeight: key.MaxWeight, RTT: sc.RTT}
	if lim.Algorithm.IsBucket() {
		p.Burst = lim.Capacity()
	}
	if sc.Fault.Kind == Kill {
		p.Wipes = 1
	}
	return p
}

// Params returns the bound's parameters for limit li of key k as this run
// needs them: the scenario's, with a round-trip allowance raised to what the
// run's rounds took. The bound's stale term, 1.1·I + r, is how long a node's
// view may lag while Redis answers; where a node's rounds ran further apart
// than that (a busy machine delays timers and round trips alike), the
// longest such gap stands in for it, so that the checker measures the
// protocol and not the machine.
func (rec *Record) Params(k, li int) BoundParams {
	p := rec.Scenario.Params(k, li)
	p.RTT = rec.rtt()
	return p
}

// rtt is the round-trip allowance for the run: the scenario's, or what the
// slowest clean gap between two rounds of any node needs beyond the
// interval and its jitter.
func (rec *Record) rtt() time.Duration {
	sc := rec.Scenario
	r := sc.RTT
	for _, n := range rec.Nodes {
		r = max(r, n.MaxGap-time.Duration(float64(sc.Interval)*(1+fleetsim.Jitter)))
	}
	return r
}

// bound holds one series to the bound over every window length.
func (r *Result) bound(rec *Record, k, li int, ds []Decision) {
	sc := rec.Scenario
	key, lim := sc.Keys[k], sc.Keys[k].Limits[li]
	var events []Event
	for _, d := range ds {
		if !d.Allowed {
			continue
		}
		if d.Source == hybrid.Degraded && sc.Fallback == hybrid.FailOpen {
			r.Excluded["bound: admitted degraded under FailOpen (by definition)"]++
			continue // admitted by definition
		}
		events = append(events, Event{At: d.At, N: d.N})
	}
	r.Series++
	p := rec.Params(k, li)
	worst := Excess{}
	for _, m := range MaxOver(events, lengths(sc, lim)) {
		r.Windows += m.Windows
		b := Bound(p, m.W)
		e := Excess{Excess: float64(m.Admitted) - b, Admitted: m.Admitted, Bound: b, W: m.W, At: m.At,
			Key: key.Name, Limit: lim, Shape: key.Shape(), Seed: sc.Seed, Valid: true}
		if e.worse(worst) {
			worst = e
		}
	}
	if worst.worse(r.Worst) {
		r.Worst = worst
	}
	if worst.worse(r.WorstBy[worst.Shape]) {
		r.WorstBy[worst.Shape] = worst
	}
	if len(key.Limits) == 1 && worst.worse(r.WorstSingle) {
		r.WorstSingle = worst
	}
	forgotten := uint64(0)
	for _, n := range rec.Nodes {
		forgotten += n.EvictionsForgotten
	}
	if worst.Excess > 0 && forgotten > 0 && key.Pattern == Churn {
		// A churning key evicted spent and back fresh once the nodes'
		// memory of evictions was full: the documented cost of a MaxKeys
		// below the keys active within a refill time, logged and counted
		// by the limiter (Stats().EvictionsForgotten). Reported apart.
		r.OverForgotten++
		return
	}
	if worst.Excess > 0 {
		r.violate("bound", "%s [%v] (%v): %d admitted over %v at %v, bound %.1f (%+.1f, %.2fx)",
			key.Name, lim, worst.Shape, worst.Admitted, worst.W, worst.At.Round(time.Millisecond), worst.Bound, worst.Excess, float64(worst.Admitted)/worst.Bound)
	}
}

// recoverySpan is how long after a fault heals the fleet is still taken as
// recovering (its breakers probing, its shares taken again).
const recoverySpan = 500 * time.Millisecond

// compliance checks that no request of a compliant stream was refused, as
// far as the stream, as delivered, conformed.
func (r *Result) compliance(rec *Record, k, li int, ds []Decision) {
	sc := rec.Scenario
	key, lim := sc.Keys[k], sc.Keys[k].Limits[li]
	reqs := make([]Timed, len(ds))
	for i, d := range ds {
		reqs[i] = Timed{Unix: rec.Start.Add(d.At).UnixNano(), N: d.N}
	}
	ok, first, why := Conforms(lim, key.Fraction, reqs)
	if !ok {
		r.NotConforming = append(r.NotConforming, fmt.Sprintf("%s [%v]: as delivered, conforms only up to request %d of %d at %v: %s",
			key.Name, lim, first, len(ds), ds[first].At.Round(time.Millisecond), why))
		r.Excluded["delivered late enough that the stream stopped conforming"] += len(ds) - first
		ds = ds[:first]
	}
	refused, by := 0, map[hybrid.Source]int{}
	var at time.Duration
	for _, d := range ds {
		if d.Err != nil {
			r.Excluded["the decision erred (a violation of its own)"]++
			continue
		}
		if !d.Allowed && d.Source == hybrid.Degraded && sc.Fallback == hybrid.FailClosed {
			r.Excluded["refused by FailClosed while degraded (by definition)"]++
			continue
		}
		if !d.Allowed && d.Source == hybrid.Degraded && key.Route != "" && key.Route != "spread" {
			// Degraded, each node decides in one over the fleet: a stream
			// that is not spread over the nodes may need more than one
			// node's share, and no node can know what the others admit.
			r.Excluded["refused degraded, one over the fleet on a node, of a stream not spread"]++
			continue
		}
		if f := sc.Fault; !d.Allowed && sc.Mode == hybrid.Async && d.Source == hybrid.Remote && f.Kind != NoFault &&
			d.At >= f.At && d.At <= f.Heal+recoverySpan {
			// Async's promise to compliant traffic holds with Redis
			// healthy: a request that waited for a Redis that was failing
			// without being down (slow, paused before the breaker opened)
			// is refused when its wait ends. Counted apart, not hidden.
			r.RefusedInFault++
			r.Excluded["refused after waiting on a failing Redis (counted apart)"]++
			continue
		}
		r.Compliant++
		r.CompliantBy[key.Route]++
		if d.Allowed {
			continue
		}
		if refused++; refused == 1 {
			at = d.At
		}
		by[d.Source]++
	}
	r.Refused += refused
	if refused > 0 {
		r.violate("refusal", "%s [%v] compliant at %.0f%%: %d of %d refused (local %d, remote %d, degraded %d), the first at %v",
			key.Name, lim, 100*key.Fraction, refused, len(ds), by[hybrid.Local], by[hybrid.Remote], by[hybrid.Degraded], at.Round(time.Millisecond))
	}
}

// ledger compares, per record of spend, what Redis holds after quiescence
// with what the fleet admitted: equal, but for spend the nodes say they
// lost (Stats().Reconcile.LostSpend) or could not report when they closed.
// After Redis lost its data only "never more than admitted, and at least
// what was admitted after the fault" can be asked.
func (r *Result) ledger(rec *Record) {
	if rec.ledger == nil {
		return
	}
	sc := rec.Scenario
	type group struct {
		admitted, after int64
		unreported      int64 // admitted by nodes whose Close failed
		names           []string
		limits          []limit.Limit
	}
	groups := map[string]*group{}
	var order []string
	for k, key := range sc.Keys {
		if key.Pattern == Unsupported {
			continue
		}
		for _, lim := range key.Limits {
			name := ledgerOf(key.Name, lim)
			if groups[name] == nil {
				groups[name] = &group{}
				order = append(order, name)
			}
			groups[name].names = append(groups[name].names, fmt.Sprintf("%s [%v]", sc.Keys[k].Name, lim))
			groups[name].limits = append(groups[name].limits, lim)
		}
	}
	var lost uint64
	for _, n := range rec.Nodes {
		lost += n.LostSpend
	}
	for _, d := range rec.Decisions {
		key := sc.Keys[d.Key]
		if !d.Allowed || key.Pattern == Unsupported {
			continue
		}
		g := groups[ledgerOf(key.Name, key.Limits[d.Limit])]
		g.admitted += d.N
		if d.At > rec.FaultAt {
			g.after += d.N
		}
		if rec.Nodes[d.Node].CloseErr != nil {
			g.unreported += d.N
		}
	}
	wiped := sc.Fault.Kind == Kill
	var short int64
	flagged := false
	for _, name := range order {
		g := groups[name]
		held, known := rec.ledger.held(name, g.limits)
		if !known {
			r.LedgerUnknown++
			continue
		}
		r.LedgerChecked++
		what := strings.Join(g.names, ", ")
		if held > g.admitted {
			r.violate("ledger", "%s: Redis holds %d, more than the %d admitted", what, held, g.admitted)
			continue
		}
		want := g.admitted
		if wiped {
			want = g.after
		}
		if miss := want - held - g.unreported; miss > 0 {
			short += miss
			if miss > int64(lost) {
				flagged = true
				r.violate("ledger", "%s: Redis holds %d of %d admitted%s; the nodes count %d lost",
					what, held, g.admitted, map[bool]string{true: fmt.Sprintf(" (%d after Redis lost its data)", g.after)}[wiped], lost)
			}
		}
	}
	if short > int64(lost) && !flagged {
		r.violate("ledger", "in all, %d admitted is neither in Redis nor counted lost (LostSpend %d)", short, lost)
	}
}
