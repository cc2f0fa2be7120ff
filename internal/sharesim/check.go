package sharesim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/fleetcheck"
	"github.com/hybridlimit/hybridlimit/limit"
)

// Result is what the checks found in one record.
type Result struct {
	Scenario *Scenario
	// Series is how many (key, limit) pairs were held to the bound, and
	// Windows how many window positions that examined; Compliant how many
	// decisions of compliant traffic were checked, Refused how many of them
	// were refused and Late how many waited longer than AskWait.
	Series, Windows, Compliant, Refused, Late int
	// Worst is the largest excess over the bound (negative: the closest any
	// window came).
	Worst      float64
	WorstWhat  string
	Violations []string
	Ops, Beats int64
	Decisions  int
	// Coverage is what the scenario sent and what the checks judged.
	Coverage Coverage
	// Classes names the kind of each violation, for counting failures by
	// class over a search: "bound: hopping", "compliance: sticky, around a
	// join", "error".
	Classes []string
}

func (r *Result) class(c string) {
	if !slices.Contains(r.Classes, c) {
		r.Classes = append(r.Classes, c)
	}
}

// Failed reports whether the run broke a promise.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

func (r *Result) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Summary describes the result, with the seed's replay command.
func (r *Result) Summary() string {
	var b strings.Builder
	verdict := "ok"
	if r.Failed() {
		verdict = fmt.Sprintf("FAILED (%d)", len(r.Violations))
	}
	fmt.Fprintf(&b, "%v\n  %s: %d series, %d windows, worst %+.1f %s; compliant %d checked, %d refused, %d late; %d decisions, %d ops, %d beats",
		r.Scenario, verdict, r.Series, r.Windows, r.Worst, r.WorstWhat, r.Compliant, r.Refused, r.Late, r.Decisions, r.Ops, r.Beats)
	for i, v := range r.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "\n  ... and %d more", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %s", v)
	}
	if r.Failed() {
		fmt.Fprintf(&b, "\n  replay: go test ./internal/sharesim -run TestReplay -seed=%d -v", r.Scenario.Seed)
	}
	return b.String()
}

// span is a stretch of time the promises are relaxed over: a fault or a
// change of the fleet, and the time the fleet takes to settle after it.
type span struct {
	from, to time.Duration
	// what names the disturbance (a fault's kind, "join", "start",
	// "leave", "crash", "pause", "clock step"); judged says compliance is
	// still judged within it: a node joining, a fleet starting together and
	// a node leaving gracefully are part of a healthy fleet's life, and a
	// compliant client may not pay for them (the bound still gets their
	// terms).
	what   string
	judged bool
	wipes  int           // the store lost its data
	step   time.Duration // a node's clock stepped by this much
	// cut: a node cut off from the store while the others reach it: it
	// decides degraded in one over the fleet while the others, once its
	// grants have lapsed, divide the rest (a rate, over the cut).
	cut bool
	// change is the capacity a change of the fleet may count twice, as a
	// fraction of the limit's: one even split ((N−1)/N) for a node joining,
	// leaving, a fleet starting together (with or without FleetSize: the
	// protocol promises it) or a fault that makes every node decide in one
	// over the fleet; the whole capacity for a reset (resetSpan).
	change float64
	// opens is, for a reset's span, the segment of the series the reset
	// opens (cuts): its term counts in the bound of that segment alone.
	// Zero: every segment.
	opens int
}

// disturbed returns the spans around sc's faults and changes of the fleet,
// each from shortly before it to when the fleet has settled after it: a few
// rounds after a node joins, leaves, pauses or its clock steps; after a fault
// of the store, until the breakers have closed again and what the store lost
// has been rebuilt (a lease, the active window and the limit's refill); after
// a node crashes, until the others no longer count it (twice the active
// window, a node never dividing by fewer than it saw within one).
func disturbed(sc *Scenario, refill time.Duration) []span {
	rounds := 3*sc.Interval + callTimeout + sc.AskWait
	before := 2*sc.Interval + callTimeout
	store := openFor + sc.ActiveWindow + sc.Lease + refill + rounds
	n := float64(len(sc.Nodes))
	var out []span
	add := func(what string, from, to, settle time.Duration, wipes int, step time.Duration) {
		out = append(out, span{what: what, from: from - before, to: to + settle, wipes: wipes, step: step, change: (n - 1) / n})
	}
	for _, f := range sc.Faults {
		wipes := 0
		if f.Kind == Kill || f.Kind == Flush || f.Kind == Evict {
			wipes = 1
		}
		add("store "+f.Kind.String(), f.From, f.To, store, wipes, 0)
		if f.Kind == Partition {
			out[len(out)-1].cut = true
		}
	}
	starting := 0
	for _, nd := range sc.Nodes {
		if nd.Join == 0 {
			starting++
		}
	}
	if starting > 1 {
		// A fleet started together is one change of the fleet, as
		// accuracy.md's bound counts it, with or without FleetSize: the
		// protocol promises it stays within that.
		add("start", 0, 0, rounds, 0, 0)
		out[len(out)-1].judged = true
	}
	for _, n := range sc.Nodes {
		if n.Join > 0 {
			add("join", n.Join, n.Join, rounds, 0, 0)
			out[len(out)-1].judged = true
		}
		if n.Leave < sc.Duration {
			settle := sc.ActiveWindow + rounds // the others divide by as many as they saw
			what := "leave"
			if n.Crash {
				settle = 2*sc.ActiveWindow + sc.Lease + rounds
				what = "crash"
			}
			add(what, n.Leave, n.Leave, settle, 0, 0)
			out[len(out)-1].judged = !n.Crash
		}
		for _, p := range n.Pauses {
			add("node pause", p.From, p.To, rounds+sc.Lease, 0, 0)
		}
		if n.Step != 0 {
			// A step below the offset's step threshold is slewed away, at
			// 5% at most: the node's clock stays off that long.
			add("clock step", n.StepAt, n.StepAt, rounds+time.Duration(float64(abs(n.Step))/clock.DefaultMaxSlew), 0, n.Step)
		}
	}
	return out
}

// Check holds rec to the promises: each (key, limit) series to the bound
// and to compliance, segment by segment between its resets (cuts).
func Check(rec *Record) *Result {
	sc := rec.Scenario
	res := &Result{Scenario: sc, Worst: -1e18, Ops: rec.Ops, Beats: rec.Beats, Decisions: len(rec.Decisions)}
	res.Coverage.sent(sc)
	for _, e := range rec.Errors {
		res.violate("error: %s", e)
		res.class("error")
	}
	type series struct{ key, li int }
	by := map[series][]Decision{}
	for _, d := range rec.Decisions {
		k := sc.Requests[d.Req].Key
		by[series{k, d.Limit}] = append(by[series{k, d.Limit}], d)
	}
	keys := make([]series, 0, len(by))
	for s := range by {
		keys = append(keys, s)
	}
	slices.SortFunc(keys, func(a, b series) int {
		if a.key != b.key {
			return a.key - b.key
		}
		return a.li - b.li
	})
	for _, s := range keys {
		ds := by[s]
		slices.SortStableFunc(ds, func(a, b Decision) int { return int(a.At - b.At) })
		cut := cutsOf(rec, s.key, s.li)
		res.bound(sc, s.key, s.li, ds, cut)
		res.compliance(sc, s.key, s.li, ds, cut)
	}
	res.Coverage.Series, res.Coverage.Windows = res.Series, res.Windows
	res.Coverage.resets(rec)
	return res
}

// refillOf is how long lim's whole capacity takes to come back.
func refillOf(lim limit.Limit) time.Duration {
	if lim.Algorithm.IsBucket() {
		return lim.Tolerance()
	}
	return 2 * lim.Period
}

// bound holds one series to the bound over every window length that
// matters: each of its segments (cut by its resets, by the time the fleet
// decided each admission) as a fresh key.
func (r *Result) bound(sc *Scenario, k, li int, ds []Decision, cut cuts) {
	segs := make([][]fleetcheck.Event, len(cut.at)+1)
	admitted := false
	for _, d := range ds {
		if d.Allowed {
			i := cut.segment(d.At)
			segs[i] = append(segs[i], fleetcheck.Event{At: d.At, N: d.N})
			admitted = true
		}
	}
	if !admitted {
		return
	}
	r.Series++
	spans := append(disturbed(sc, refillOf(sc.Keys[k].Limits[li])), cut.spans...)
	for seg, events := range segs {
		if len(events) == 0 {
			continue
		}
		windows := r.Windows
		ok := r.boundSegment(sc, k, li, seg, events, spans)
		if seg > 0 {
			r.Coverage.Resets.Windows += r.Windows - windows
		}
		if !ok {
			return
		}
	}
}

// boundSegment holds segment seg of a series (its admissions, events) to
// the bound, as a fresh key: the reset that opened it (if any) adds its
// term, the others do not. It reports whether it held.
func (r *Result) boundSegment(sc *Scenario, k, li, seg int, events []fleetcheck.Event, all []span) bool {
	spans := slices.DeleteFunc(slices.Clone(all), func(sp span) bool { return sp.opens != 0 && sp.opens != seg })
	key := sc.Keys[k]
	lim := key.Limits[li]
	n := float64(len(sc.Nodes))
	c := float64(lim.Capacity())
	perSecond := float64(lim.Rate) / lim.Period.Seconds()
	lengths := []time.Duration{sc.Interval, 100 * time.Millisecond, lim.Period, time.Second, refillOf(lim), sc.Duration + drain}
	slices.Sort(lengths)
	lengths = slices.Compact(lengths)
	for _, w := range lengths {
		// Each node reads the store's clock through its own, aligned within
		// half a round trip and moving forward as the estimate improves:
		// admissions a node spaces by the limit may sit that much closer on
		// the store's clock, and window edges that much apart.
		exactW := w + time.Millisecond
		if !lim.Algorithm.IsBucket() {
			exactW += time.Millisecond
		}
		exact := float64(fleetcheck.ExactMax(lim.Algorithm, lim.Rate, lim.Period, lim.Burst, key.Weight, exactW))
		strict := exact + c*n/65536
		// Slide a window of length w over the admissions, one start per
		// admission, and hold each to its bound.
		j := 0
		var sum int64
		for i := range events {
			if i > 0 {
				sum -= events[i-1].N
				if events[i].At == events[i-1].At {
					continue
				}
			}
			if j < i {
				j, sum = i, 0
			}
			for j < len(events) && events[j].At <= events[i].At+w {
				sum += events[j].N
				j++
			}
			r.Windows++
			from, to := events[i].At, events[i].At+w
			// Each disturbance the window meets adds its own term.
			bound := strict
			for _, sp := range spans {
				if sp.to >= from && sp.from <= to {
					bound += sp.change*c + perSecond*(1.1*sc.Interval.Seconds()+0.01)/n +
						c*float64(sp.wipes) + perSecond*abs(sp.step).Seconds()
					if sp.cut {
						bound += perSecond * (min(to, sp.to) - max(from, sp.from)).Seconds() / n
					}
				}
			}
			excess := float64(sum) - bound
			if excess > r.Worst {
				r.Worst = excess
				r.WorstWhat = fmt.Sprintf("(%s [%v] %v: %d admitted in %v at %v, bound %.1f)", key.Name, lim, key.Routing, sum, w, from.Round(time.Millisecond), bound)
			}
			if excess > 0 {
				r.violate("bound: %s [%v] (%v): %d admitted within %v from %v, bound %.1f (%+.1f)%s", key.Name, lim, key.Routing, sum, w, from.Round(time.Millisecond), bound, excess, afterReset(seg))
				r.class(fmt.Sprintf("bound: %v%s%s", key.Routing, meets(spans, from, to), afterReset(seg)))
				return false
			}
		}
	}
	return true
}

// sinceReset says, for a failing request seen at seen in segment seg, how
// long after the reset that opened it.
func sinceReset(cut cuts, seg int, seen time.Duration) string {
	if seg == 0 {
		return ""
	}
	return fmt.Sprintf(", %v after a reset", (seen - cut.at[seg-1]).Round(time.Microsecond))
}

// afterReset says, for a violation in segment seg of its series, that it
// came after a reset.
func afterReset(seg int) string {
	if seg == 0 {
		return ""
	}
	return ", after a reset"
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// compliance judges one series on the other side of the promise: traffic
// an exact limiter admits whole is admitted whole, each request within
// AskWait.
//
// The standard is one exact limiter of the series' limit fed every request
// at the time the node that took it read its estimate of the store's clock
// (Decision.Seen: what the node's engine charged it at, which the
// simulation knows exactly, skew and the estimate's error included), in
// that order. No margin: a burst of the whole capacity sent to one node at
// one instant is seen at one instant and judged exactly. A request the
// exact limiter refuses is over the limit, and so is every request of the
// series within a refill after it (the fleet may have admitted what the
// exact limiter refused, as the bound lets it, and owes it back); the exact
// limiter charges what the fleet admitted beyond it.
//
// The one tolerance in what is judged is the wait, at the edge of the
// limit: a request that finds its node's share short waits up to AskWait
// for room, and a request over the limit that arrives meanwhile on a node
// that still holds some takes it. Which of the two an exact limiter admits
// depends on their order; which one a fleet of shares admits depends on
// where the room is. So requests within AskWait (and a millisecond, the
// answer's trip) before a request the exact limiter refuses are not judged:
// traffic that stays within the limit has no such edge. Requests sent within a
// disturbance that is not part of a healthy fleet's life (a fault of the
// store, a node partitioned, paused, crashed, its clock stepped) are fed to
// the standard but not judged. Joins, a fleet starting together and
// graceful leaves are judged.
//
// A reset made cuts the series (cuts): the requests seen from it on are
// judged against a fresh exact limiter, as a fresh key, with their own
// requests over the limit; those sent around it, while the other nodes
// hear of it (resetSpan), or seen by their node then, are fed to the
// standard but not judged.
//
// The one tolerance is the wait: a request is late when it was decided
// more than AskWait after the node first took it, plus a millisecond for
// the reply's trip back from the store (the longest hop, spikes included,
// is under 2 ms; the answer's trip is half a round trip). The time a
// request spent before its node's first heartbeat (a node that has just
// joined cannot decide yet) is not counted.
func (r *Result) compliance(sc *Scenario, k, li int, ds []Decision, cut cuts) {
	key := sc.Keys[k]
	lim := key.Limits[li]
	seen := slices.Clone(ds)
	slices.SortStableFunc(seen, func(a, b Decision) int {
		switch {
		case a.Seen != b.Seen:
			return cmp.Compare(a.Seen, b.Seen)
		case a.Sent != b.Sent:
			return cmp.Compare(a.Sent, b.Sent)
		}
		return a.Req - b.Req
	})
	spans := append(disturbed(sc, refillOf(lim)), cut.spans...)
	refill := refillOf(lim)
	// The standard's verdict on each request, in the order seen, and the
	// times of those it refuses, segment by segment: a fresh exact limiter
	// from each reset on.
	conform := make([]bool, len(seen))
	room := make([]float64, len(seen)) // the standard's room left after each
	overs := make([][]time.Duration, len(cut.at)+1)
	seg := cut.standard(lim, seen, func(i int, std *exact) {
		d := seen[i]
		conform[i] = std.admit(base+int64(d.Seen), d.N)
		room[i] = std.room(base + int64(d.Seen))
		if !conform[i] {
			s := cut.segment(d.Seen)
			overs[s] = append(overs[s], d.Seen)
			if d.Allowed {
				std.charge(base+int64(d.Seen), d.N)
			}
		}
	})
	edge := sc.AskWait + time.Millisecond
	judged := make(map[int]bool, len(seen)) // by request
	refused, late, n := 0, 0, 0
	first, class := "", ""
	cov := &r.Coverage
	after := make([]segCount, len(cut.at)+1) // each segment's decisions, judged and failed
	for i, d := range seen {
		after[seg[i]].decisions++
		// The first request over the limit at or after this one, and the
		// last before it, in its segment.
		overs := overs[seg[i]]
		j, _ := slices.BinarySearch(overs, d.Seen)
		switch {
		case !conform[i] || j > 0 && d.Seen < overs[j-1]+refill:
			cov.exclude("over the limit (an exact limiter refuses it, or one within a refill before it)")
			continue
		case j < len(overs) && overs[j] <= d.Seen+edge:
			cov.exclude("at the edge of the limit (within AskWait before a request over it)")
			continue
		}
		if sp, relaxed := cut.relaxing(spans, d); relaxed {
			cov.exclude(sp.what)
			continue
		}
		n++
		judged[d.Req] = true
		after[seg[i]].judged++
		switch {
		case !d.Allowed:
			refused++
		case d.At-d.First > sc.AskWait+time.Millisecond:
			late++
		default:
			continue
		}
		after[seg[i]].failed++
		if first == "" {
			var prev *Decision
			if i > 0 {
				prev = &seen[i-1]
			}
			class = "compliance: " + circumstance(sc, lim, d, prev, refill, room[i]) + afterReset(seg[i])
			first = fmt.Sprintf("node %d at %v (%v, waited %v, source %v%s%s)", d.Node, d.Sent.Round(time.Microsecond),
				map[bool]string{true: "admitted", false: "refused"}[d.Allowed], d.At-d.First, d.Source, near(spans, d.Sent), sinceReset(cut, seg[i], d.Seen))
		}
	}
	cov.judge(sc, key, lim, ds, judged, n, refused+late)
	cov.Resets.segments(after[1:])
	if slices.ContainsFunc(overs, func(o []time.Duration) bool { return len(o) > 0 }) {
		cov.over(key.Routing, lim, seen, spans, cut)
	}
	r.Compliant += n
	r.Refused += refused
	r.Late += late
	if refused > 0 || late > 0 {
		r.violate("compliance: %s [%v] (%v, fraction %.2f, weight %d): %d refused, %d waited past AskWait, of %d judged; first: %s; %s",
			key.Name, lim, key.Routing, key.Fraction, key.Weight, refused, late, n, first, strings.TrimPrefix(class, "compliance: "))
		r.class(class)
	}
}

// circumstance describes what a failing request of compliant traffic met,
// for counting failures by class: FleetSize set with a node joining late
// (the store reserves its even split until it joins the key's contest), a
// fleet started together without FleetSize, a pooled key (one request
// weighs more than an even split), the limit's last room (less than one
// request left after it in the exact limiter), demand that came from
// another node within a refill, or demand on one node; and what the store
// last answered the node's asks on the key.
func circumstance(sc *Scenario, lim limit.Limit, d Decision, prev *Decision, refill time.Duration, room float64) string {
	var what string
	starting := 0
	late := false
	for _, nd := range sc.Nodes {
		if nd.Join == 0 {
			starting++
		}
		late = late || nd.Join > 0
	}
	n := int64(len(sc.Nodes))
	switch {
	case sc.FleetSize > 0 && late:
		what = "FleetSize set, a node joining late"
	case sc.FleetSize == 0 && starting > 1 && d.Sent < 3*sc.Interval+callTimeout+sc.AskWait:
		what = "a fleet started together without FleetSize"
	case d.N*n > lim.Capacity():
		what = "a pooled key (a request heavier than an even split)"
	case room < 1:
		what = "the limit's last room (under a request left after it)"
	case prev != nil && prev.Node != d.Node && d.Seen-prev.Seen < refill:
		what = "demand moving between nodes"
	default:
		what = "demand on one node"
	}
	switch {
	case d.Allowed:
		what += ", admitted past AskWait"
	case d.Source == Local:
		what += ", refused by the node alone"
	case d.Asked:
		what += ", refused after the store answered " + d.Told.String()
	default:
		what += ", refused at the end of AskWait"
	}
	return what
}

// relaxing returns the disturbance span whose promises are relaxed at at
// (a request sent then is not judged), if any.
func relaxing(spans []span, at time.Duration) (span, bool) {
	for _, sp := range spans {
		if !sp.judged && at >= sp.from && at <= sp.to {
			return sp, true
		}
	}
	return span{}, false
}

// meets names the disturbances a window from from to to meets, if any.
func meets(spans []span, from, to time.Duration) string {
	var whats []string
	for _, sp := range spans {
		if sp.to >= from && sp.from <= to && !slices.Contains(whats, sp.what) {
			whats = append(whats, sp.what)
		}
	}
	if len(whats) == 0 {
		return ", with no disturbance"
	}
	slices.Sort(whats)
	return ", meeting " + strings.Join(whats, ", ")
}

// near names the judged changes of the fleet around at, if any.
func near(spans []span, at time.Duration) string {
	var whats []string
	for _, sp := range spans {
		if sp.judged && at >= sp.from && at <= sp.to && !slices.Contains(whats, sp.what) {
			whats = append(whats, sp.what)
		}
	}
	if len(whats) == 0 {
		return ""
	}
	return ", around a " + strings.Join(whats, ", a ")
}
