package sharesim

import (
	"cmp"
	"slices"
	"sort"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// cuts is one (key, limit) series' resets as the checks judge them. A reset
// made (the store reset the contest and the resetting node was told: the
// caller's Reset returned nil, the client was forgiven) makes the key fresh
// for an exact limiter: it cuts the series into segments, each judged as a
// fresh key, for the bound and for compliance. Around each, a span relaxes
// the promises for the time the other nodes take to hear of it (span): a
// node that has not heard decides on its state from before (stricter than
// the fresh key, or the room it had left, while the pool is fresh).
type cuts struct {
	at    []time.Duration // the resets made, on the store's clock, in order
	spans []span          // around each reset made, and each unconfirmed
}

// cutsOf returns series (k, li)'s cuts in rec.
func cutsOf(rec *Record, k, li int) cuts {
	sc := rec.Scenario
	var c cuts
	for _, r := range rec.Resets {
		if r.Key != k || r.Limit != li || !r.Stored {
			continue
		}
		if !r.Made {
			c.spans = append(c.spans, unconfirmedSpan(sc, r.Ran))
			continue
		}
		c.at = append(c.at, r.Ran)
		c.spans = append(c.spans, resetSpan(sc, r.Ran, len(c.at)))
	}
	return c
}

// segment is the segment a decision at t (the store's clock) belongs to:
// the number of resets made at or before t.
func (c cuts) segment(t time.Duration) int {
	return sort.Search(len(c.at), func(i int) bool { return c.at[i] > t })
}

// resetSettle is how long the other nodes may take to hear of a reset and
// start the key afresh: the resetting node's heartbeat carries it at once,
// and the others hear it on the channel a hop later; one the channel
// missed (one time in fifty) reads it in the registry at its next
// heartbeat, an interval later when busy, a quiet beat when quiet (a node
// with no traffic beats that seldom); a request that arrived meanwhile
// waits AskWait, and the call that brings it back callTimeout at most. As
// the spans of disturbed, a few rounds.
func resetSettle(sc *Scenario) time.Duration {
	quiet := max(sc.Interval, min(protocol.QuietBeat, sc.ActiveWindow/4))
	return 3*sc.Interval + callTimeout + sc.AskWait + quiet
}

// resetSpan is the span around reset made at (the store's clock), which
// opens segment seg: from AskWait before it (a request that waited across
// the reset, or one a node's estimate of the store's clock placed on the
// other side of it) to resetSettle after. Compliance is not judged within
// it; the bound allows the capacity once more in the segment it opens, and
// only there: nodes that have not heard admit from the room they had left
// while the pool is fresh, and start afresh when they hear, at most the
// whole capacity counted twice.
func resetSpan(sc *Scenario, at time.Duration, seg int) span {
	return span{what: "reset", from: at - sc.AskWait - time.Millisecond, to: at + resetSettle(sc), change: 1, opens: seg}
}

// unconfirmedSpan is the span after a reset the store ran though its call
// failed (a paused or slow store answering after the call's timeout): the
// caller was told the client was not forgiven, and no node starts the key
// afresh, so the series is not cut; but the pool was made fresh, and for
// an active window the store takes every node's state as from before the
// reset (fresh: no op says it heard of it). The bound allows the capacity
// once more over that; compliance is judged as before (a pool made fresh
// only adds room).
func unconfirmedSpan(sc *Scenario, at time.Duration) span {
	return span{what: "reset unconfirmed", from: at, to: at + sc.ActiveWindow + resetSettle(sc), change: 1, judged: true}
}

// relaxing returns the span whose promises are relaxed for decision d
// (spans: all of its series', c's among them), if any: one d was sent
// within, or a reset's d was seen within (sent before it to a node not
// ready yet, and decided after it by a node that may not have heard).
func (c cuts) relaxing(spans []span, d Decision) (span, bool) {
	if sp, ok := relaxing(spans, d.Sent); ok {
		return sp, true
	}
	return relaxing(c.spans, d.Seen)
}

// carried returns, for each segment of c, the decisions of requests seen
// in an earlier segment that the fleet admitted in it (they waited across
// its reset, and the fresh key paid for them), in the order admitted: the
// fresh exact limiter is charged with them.
func (c cuts) carried(ds []Decision) [][]Decision {
	out := make([][]Decision, len(c.at)+1)
	for _, d := range ds {
		if s := c.segment(d.At); d.Allowed && s > c.segment(d.Seen) {
			out[s] = append(out[s], d)
		}
	}
	for _, cs := range out {
		slices.SortStableFunc(cs, func(a, b Decision) int { return cmp.Compare(a.At, b.At) })
	}
	return out
}

// standard feeds seen (a series' decisions in the order seen) to a fresh
// exact limiter of lim per segment of c, each charged with what it carried
// (carried), and returns each decision's segment; fn is called with each
// decision and the standard as it reaches it.
func (c cuts) standard(lim limit.Limit, seen []Decision, fn func(i int, std *exact)) []int {
	carry := c.carried(seen)
	seg := make([]int, len(seen))
	var std *exact
	next := 0
	for i, d := range seen {
		seg[i] = c.segment(d.Seen)
		if std == nil || seg[i] != seg[i-1] {
			std, next = newExact(lim), 0
		}
		for cs := carry[seg[i]]; next < len(cs) && cs[next].At <= d.Seen; next++ {
			std.charge(base+int64(cs[next].At), cs[next].N)
		}
		fn(i, std)
	}
	return seg
}
