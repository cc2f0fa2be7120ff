package sharesim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Coverage is what scenarios sent and what the checks judged of it: a
// generator is only as good as what it sends, and a check only as good as
// what it does not leave out. Check fills one per run; Add sums them over a
// search. The zero value is empty and ready to use; not safe for concurrent
// use.
type Coverage struct {
	Scenarios int
	// Keys and Requests count the keys of each routing and the requests
	// they sent; Traits the keys with several limits, weighted requests,
	// requests as heavy as the capacity.
	Keys, Requests map[Routing]int
	Traits         map[string]int
	// Events counts the scenarios with each fault of the store and each
	// change of the fleet.
	Events map[string]int
	// Series and Windows count what the bound judged.
	Series, Windows int
	// Streams counts the (key, limit) series offered to the compliance
	// check, and StreamsJudged those with at least one request judged;
	// Judged the requests judged, by routing, and Failed those of them
	// refused or late; Excluded the requests left out, by why.
	Streams, StreamsJudged int
	Judged, Failed         map[Routing]int
	Excluded               map[string]int
	// Bursts counts, by routing and algorithm, the bursts sent (requests of
	// one key reaching one node at one instant), those using the whole
	// capacity, and how many of each were judged whole.
	Bursts map[string]*BurstCount
	// Over counts, by routing, the (key, limit) series offered more than
	// their limit: what an exact limiter admitted of their requests and
	// what the fleet did, outside faults and changes of the fleet. Nothing is judged on them (the bound holds the fleet's excess);
	// this shows how much of what the limit allows the fleet refused.
	Over map[Routing]OverCount
	// Resets is what the scenarios' resets did and what the checks judged
	// after them.
	Resets ResetCount
}

// ResetCount is what resets under load did, and what the checks judged
// after them: a reset cuts its series, and what follows is judged as a
// fresh key (cuts).
type ResetCount struct {
	// Calls counts the resets the scenarios called (on a store that can
	// reset); Made those the store ran and the caller was told of (the
	// client forgiven), NoContest of them those with no contest in the
	// store (every node deciding the key alone); Failed those whose call
	// failed (the breaker open, the store out of reach: nothing forgiven),
	// Unconfirmed of them those the store ran all the same (a paused or
	// slow store, late).
	Calls, Made, NoContest, Failed, Unconfirmed int
	// Segments counts the stretches of (key, limit) series after a reset
	// made that had decisions, Judged those with decisions judged for
	// compliance; Decisions, Checked and Bad the decisions in them, those
	// judged and those of them refused or late; Windows the bound's
	// windows in them.
	Segments, Judged        int
	Decisions, Checked, Bad int
	Windows                 int
}

// segCount is one segment's decisions, judged and failed.
type segCount struct{ decisions, judged, failed int }

// segments tallies the segments of a series after its resets.
func (c *ResetCount) segments(segs []segCount) {
	for _, sg := range segs {
		if sg.decisions == 0 {
			continue
		}
		c.Segments++
		if sg.judged > 0 {
			c.Judged++
		}
		c.Decisions += sg.decisions
		c.Checked += sg.judged
		c.Bad += sg.failed
	}
}

// resets tallies what became of rec's resets.
func (c *Coverage) resets(rec *Record) {
	r := &c.Resets
	for _, d := range rec.Resets {
		if !d.Played {
			continue
		}
		r.Calls++
		switch {
		case d.Made:
			r.Made++
			if !d.Contest {
				r.NoContest++
			}
		default:
			r.Failed++
			if d.Stored {
				r.Unconfirmed++
			}
		}
	}
}

func (a ResetCount) plus(b ResetCount) ResetCount {
	return ResetCount{a.Calls + b.Calls, a.Made + b.Made, a.NoContest + b.NoContest, a.Failed + b.Failed,
		a.Unconfirmed + b.Unconfirmed, a.Segments + b.Segments, a.Judged + b.Judged, a.Decisions + b.Decisions,
		a.Checked + b.Checked, a.Bad + b.Bad, a.Windows + b.Windows}
}

// OverCount is what the series over their limit were admitted: Exact by
// one exact limiter over the same requests, Admitted by the fleet, and Low
// the series the fleet admitted less than 90% of Exact.
type OverCount struct{ Series, Exact, Admitted, Low int }

func (a OverCount) plus(b OverCount) OverCount {
	return OverCount{a.Series + b.Series, a.Exact + b.Exact, a.Admitted + b.Admitted, a.Low + b.Low}
}

// BurstCount is how many bursts were sent and judged whole.
type BurstCount struct{ Sent, Judged, Whole, WholeJudged int }

func (c *Coverage) init() {
	if c.Over == nil {
		c.Over = map[Routing]OverCount{}
	}
	if c.Keys == nil {
		c.Keys, c.Requests, c.Judged, c.Failed = map[Routing]int{}, map[Routing]int{}, map[Routing]int{}, map[Routing]int{}
		c.Traits, c.Events, c.Excluded, c.Bursts = map[string]int{}, map[string]int{}, map[string]int{}, map[string]*BurstCount{}
	}
}

// sent tallies what sc sends.
func (c *Coverage) sent(sc *Scenario) {
	c.init()
	c.Scenarios++
	for _, k := range sc.Keys {
		c.Keys[k.Routing]++
		if len(k.Limits) > 1 {
			c.Traits["several limits on one key"]++
		}
		if k.Weight > 1 {
			c.Traits["weighted requests"]++
		}
	}
	heavy := map[int]bool{}
	for _, rq := range sc.Requests {
		k := sc.Keys[rq.Key]
		c.Requests[k.Routing]++
		if rq.N > 1 && !heavy[rq.Key] && slices.ContainsFunc(k.Limits, func(l limit.Limit) bool { return rq.N >= l.Capacity() }) {
			heavy[rq.Key] = true
			c.Traits["a request weighing the whole capacity"]++
		}
	}
	events := map[string]bool{}
	wipes := 0
	for _, f := range sc.Faults {
		events["store "+f.Kind.String()] = true
		if f.Kind == Kill || f.Kind == Flush {
			wipes++
		}
	}
	if wipes >= 2 {
		events["store restarted empty twice"] = true
	}
	starting := 0
	fleetSize := map[bool]string{true: " (FleetSize set)", false: " (no FleetSize)"}[sc.FleetSize > 0]
	for _, nd := range sc.Nodes {
		if nd.Join == 0 {
			starting++
		} else {
			events["a node joins late"+fleetSize] = true
		}
		if nd.Leave < sc.Duration {
			events[map[bool]string{true: "a node crashes", false: "a node leaves"}[nd.Crash]] = true
		}
		if len(nd.Pauses) > 0 {
			events["a node pauses"] = true
		}
		if nd.Step != 0 {
			events["a node's clock steps"] = true
		}
	}
	if starting > 1 {
		events["a fleet starts together"+fleetSize] = true
	}
	if len(sc.Resets) > 0 {
		events["a key reset under load"] = true
	}
	for e := range events {
		c.Events[e]++
	}
}

func (c *Coverage) exclude(why string) {
	c.init()
	c.Excluded[why]++
}

// judge tallies one series' compliance check: n requests judged (those of
// judged), failed of them refused or late.
func (c *Coverage) judge(sc *Scenario, key Key, lim limit.Limit, ds []Decision, judged map[int]bool, n, failed int) {
	c.init()
	c.Streams++
	if n > 0 {
		c.StreamsJudged++
	}
	c.Judged[key.Routing] += n
	c.Failed[key.Routing] += failed
	type at struct {
		sent time.Duration
		node int
	}
	type burst struct {
		count int
		n     int64
		whole bool // every request judged
	}
	bursts := map[at]*burst{}
	for _, d := range ds {
		b := bursts[at{d.Sent, d.Node}]
		if b == nil {
			b = &burst{whole: true}
			bursts[at{d.Sent, d.Node}] = b
		}
		b.count++
		b.n += d.N
		b.whole = b.whole && judged[d.Req]
	}
	name := key.Routing.String() + " " + lim.Algorithm.String()
	for _, b := range bursts {
		if b.count < 2 {
			continue
		}
		bc := c.Bursts[name]
		if bc == nil {
			bc = &BurstCount{}
			c.Bursts[name] = bc
		}
		bc.Sent++
		whole := b.n >= lim.Capacity()
		if whole {
			bc.Whole++
		}
		if b.whole {
			bc.Judged++
			if whole {
				bc.WholeJudged++
			}
		}
	}
}

// Add adds o to c.
func (c *Coverage) Add(o *Coverage) {
	c.init()
	c.Scenarios += o.Scenarios
	c.Series += o.Series
	c.Windows += o.Windows
	c.Streams += o.Streams
	c.StreamsJudged += o.StreamsJudged
	for _, m := range [][2]map[Routing]int{{c.Keys, o.Keys}, {c.Requests, o.Requests}, {c.Judged, o.Judged}, {c.Failed, o.Failed}} {
		for k, v := range m[1] {
			m[0][k] += v
		}
	}
	for _, m := range [][2]map[string]int{{c.Traits, o.Traits}, {c.Events, o.Events}, {c.Excluded, o.Excluded}} {
		for k, v := range m[1] {
			m[0][k] += v
		}
	}
	for r, v := range o.Over {
		c.Over[r] = c.Over[r].plus(v)
	}
	c.Resets = c.Resets.plus(o.Resets)
	for k, v := range o.Bursts {
		bc := c.Bursts[k]
		if bc == nil {
			bc = &BurstCount{}
			c.Bursts[k] = bc
		}
		bc.Sent += v.Sent
		bc.Judged += v.Judged
		bc.Whole += v.Whole
		bc.WholeJudged += v.WholeJudged
	}
}

func pct(a, b int) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}

// String prints the coverage as tables: what was sent (routings, traits,
// faults and changes of the fleet, in how many scenarios each), what the
// bound judged, and what the compliance check judged and left out, and why.
func (c *Coverage) String() string {
	c.init()
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(&b, "sent, over %d scenarios:\n", c.Scenarios)
	fmt.Fprintf(w, "routing\tkeys\trequests\tjudged for compliance\tof them refused or late\t\n")
	for r := range Routing(len(routingNames)) {
		fmt.Fprintf(w, "%v\t%d\t%d\t%d (%s)\t%d\t\n", r, c.Keys[r], c.Requests[r], c.Judged[r], pct(c.Judged[r], c.Requests[r]), c.Failed[r])
	}
	w.Flush()
	for _, k := range slices.Sorted(maps.Keys(c.Traits)) {
		fmt.Fprintf(&b, "  %s: %d keys\n", k, c.Traits[k])
	}
	fmt.Fprintf(w, "fault or change of the fleet\tscenarios\t\n")
	for _, k := range slices.Sorted(maps.Keys(c.Events)) {
		fmt.Fprintf(w, "%s\t%d (%s)\t\n", k, c.Events[k], pct(c.Events[k], c.Scenarios))
	}
	w.Flush()
	fmt.Fprintf(&b, "bound: %d series, %d windows judged (none left out: disturbances add their terms)\n", c.Series, c.Windows)
	fmt.Fprintf(w, "over the limit, outside disturbances\tseries\tan exact limiter admitted\tthe fleet admitted\tseries under 90%% of it\t\n")
	for r := range Routing(len(routingNames)) {
		if oc, ok := c.Over[r]; ok {
			fmt.Fprintf(w, "%v\t%d\t%d\t%d (%s)\t%d\t\n", r, oc.Series, oc.Exact, oc.Admitted, pct(oc.Admitted, oc.Exact), oc.Low)
		}
	}
	w.Flush()
	judged, excluded := 0, 0
	for _, v := range c.Judged {
		judged += v
	}
	for _, v := range c.Excluded {
		excluded += v
	}
	fmt.Fprintf(&b, "compliance: %d series offered, %d with requests judged; %d request decisions judged, %d left out (%s):\n",
		c.Streams, c.StreamsJudged, judged, excluded, pct(excluded, judged+excluded))
	for _, k := range slices.Sorted(maps.Keys(c.Excluded)) {
		fmt.Fprintf(&b, "  left out, %s: %d (%s)\n", k, c.Excluded[k], pct(c.Excluded[k], judged+excluded))
	}
	rc := c.Resets
	fmt.Fprintf(&b, "resets: %d called, %d made (%d with no contest in the store), %d failed (%d of them run by the store all the same)\n",
		rc.Calls, rc.Made, rc.NoContest, rc.Failed, rc.Unconfirmed)
	fmt.Fprintf(&b, "  after a reset made: %d series' segments with decisions, %d of them judged for compliance; %d decisions, %d judged (%s), %d of them refused or late; %d bound windows\n",
		rc.Segments, rc.Judged, rc.Decisions, rc.Checked, pct(rc.Checked, rc.Decisions), rc.Bad, rc.Windows)
	fmt.Fprintf(w, "bursts (one key, one node, one instant)\tsent\tjudged whole\tusing the whole capacity\tof them judged whole\t\n")
	for _, k := range slices.Sorted(maps.Keys(c.Bursts)) {
		v := c.Bursts[k]
		fmt.Fprintf(w, "%s\t%d\t%d (%s)\t%d\t%d (%s)\t\n", k, v.Sent, v.Judged, pct(v.Judged, v.Sent), v.Whole, v.WholeJudged, pct(v.WholeJudged, v.Whole))
	}
	w.Flush()
	return b.String()
}

// over counts a series offered more than its limit: what one exact limiter
// admits of its requests, in the order the nodes took them (afresh from
// each reset made), against what the fleet admitted, leaving out the
// requests sent while a fault, a change of the fleet or a reset relaxes
// the promises (spans).
func (c *Coverage) over(r Routing, lim limit.Limit, seen []Decision, spans []span, cut cuts) {
	c.init()
	oc := OverCount{Series: 1}
	cut.standard(lim, seen, func(i int, std *exact) {
		d := seen[i]
		ok := std.admit(base+int64(d.Seen), d.N)
		if _, relaxed := cut.relaxing(spans, d); relaxed {
			return
		}
		if ok {
			oc.Exact += int(d.N)
		}
		if d.Allowed {
			oc.Admitted += int(d.N)
		}
	})
	if float64(oc.Admitted) < 0.9*float64(oc.Exact) {
		oc.Low = 1
	}
	c.Over[r] = c.Over[r].plus(oc)
}
