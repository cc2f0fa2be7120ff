package sharesim

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// withReset adds to rec a reset of its key at at (the store's clock):
// made (the node was told), or its call failed after the store ran it.
func withReset(rec *Record, at time.Duration, made bool) *Record {
	rec.Resets = append(rec.Resets, ResetDone{Reset: Reset{At: at}, Played: true, Stored: true, Contest: true, Ran: at, Made: made})
	return rec
}

// decided adds to rec count requests of weight 1 sent (and seen) at sent
// and admitted at at.
func decided(rec *Record, sent, at time.Duration, count int) *Record {
	for range count {
		rec.Scenario.Requests = append(rec.Scenario.Requests, Request{At: sent, N: 1})
		rec.Decisions = append(rec.Decisions, Decision{Req: len(rec.Scenario.Requests) - 1, Sent: sent, Seen: sent, First: sent, At: at, N: 1, Allowed: true})
	}
	return rec
}

// A reset made cuts its series: what follows is judged as a fresh key.
// handRecord's scenario (interval 20 ms, AskWait 40 ms) hears of a reset
// within resetSettle, 400 ms: requests sent then are not judged.
func TestAResetCutsTheSeries(t *testing.T) {
	lim := limit.PerSecond(10)
	twice := []time.Duration{100 * time.Millisecond, 800 * time.Millisecond} // the second within a refill of the first
	cases := []struct {
		name    string
		rec     *Record
		judged  int // decisions judged for compliance
		after   int // of them after the reset
		failed  bool
		exclude string // a reason requests were left out for
	}{
		{name: "no reset: the second burst is over the limit",
			rec: handRecord(lim, twice, 10, nil), judged: 10, exclude: "at the edge"},
		{name: "a reset between: the second burst is judged whole",
			rec: withReset(handRecord(lim, twice, 10, nil), 300*time.Millisecond, true), judged: 20, after: 10},
		{name: "a reset between, a request of the second burst refused",
			rec: withReset(handRecord(lim, twice, 10, map[int]bool{15: true}), 300*time.Millisecond, true), judged: 20, after: 10, failed: true},
		{name: "a reset whose call failed does not cut",
			rec: withReset(handRecord(lim, twice, 10, nil), 300*time.Millisecond, false), judged: 10, exclude: "at the edge"},
		{name: "requests that waited across the reset charge the fresh key",
			rec: decided(decided(withReset(handRecord(lim, twice[:1], 10, nil), 300*time.Millisecond, true),
				290*time.Millisecond, 305*time.Millisecond, 10), 800*time.Millisecond, 800*time.Millisecond, 10),
			judged: 10, exclude: "over the limit"},
		{name: "a burst within the reset's span is not judged",
			rec:    withReset(handRecord(lim, []time.Duration{100 * time.Millisecond, 350 * time.Millisecond}, 10, map[int]bool{15: true}), 300*time.Millisecond, true),
			judged: 10, exclude: "reset"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := Check(c.rec)
			rc := res.Coverage.Resets
			if res.Compliant != c.judged || rc.Checked != c.after || res.Failed() != c.failed {
				t.Errorf("judged %d (%d after the reset), violations %v; want %d judged (%d after), failed %v",
					res.Compliant, rc.Checked, res.Violations, c.judged, c.after, c.failed)
			}
			if c.failed && !strings.Contains(res.Violations[0], "after a reset") {
				t.Errorf("violation %q does not say it came after a reset", res.Violations[0])
			}
			if c.exclude != "" && !slices.ContainsFunc(slices.Collect(maps.Keys(res.Coverage.Excluded)), func(why string) bool { return strings.HasPrefix(why, c.exclude) }) {
				t.Errorf("left out %v: want some %q", res.Coverage.Excluded, c.exclude)
			}
		})
	}
}

// The bound judges each segment as a fresh key, and allows the capacity
// once more within a reset's span (nodes that have not heard admit from
// the room they had left while the pool is fresh), not twice more.
func TestTheBoundAcrossAReset(t *testing.T) {
	lim := limit.PerSecond(10)
	// before admitted at 100 ms, after at 150 ms, within one 100 ms window;
	// a reset between at 120 ms (made, or its call failed) if made is set.
	rec := func(before, after int, reset, made bool) *Record {
		r := decided(handRecord(lim, []time.Duration{100 * time.Millisecond}, before, nil), 150*time.Millisecond, 150*time.Millisecond, after)
		if reset {
			withReset(r, 120*time.Millisecond, made)
		}
		return r
	}
	cases := []struct {
		name   string
		rec    *Record
		failed bool
	}{
		{"no reset: twice the capacity within 50 ms", rec(10, 10, false, false), true},
		{"a reset between: the capacity on each side", rec(10, 10, true, true), false},
		{"a reset between: twice the capacity after it", rec(10, 20, true, true), false},
		{"a reset between: three times the capacity after it", rec(10, 30, true, true), true},
		{"a reset whose call failed: the capacity once more", rec(10, 10, true, false), false},
		{"a reset whose call failed: not twice more", rec(10, 20, true, false), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := Check(c.rec)
			var bound []string
			for _, v := range res.Violations {
				if strings.HasPrefix(v, "bound") {
					bound = append(bound, v)
				}
			}
			if (len(bound) > 0) != c.failed {
				t.Errorf("bound violations %v; want failed %v", bound, c.failed)
			}
		})
	}
}

// Resets are drawn from a stream of their own: a seed that draws none
// plays the scenario it drew before there were resets (the regression
// seeds hold), and one that draws some changes only the traffic of the
// keys whose client comes back. About 30% of scenarios reset, half of
// the resets missed by the channel, after half the client comes back.
func TestResetsLeaveTheOtherDrawsAlone(t *testing.T) {
	const count = 400
	with, missed, back, resets := 0, 0, 0, 0
	for seed := int64(1); seed <= count; seed++ {
		sc, before := Generate(seed), generate(seed, false)
		if before.Resets != nil {
			t.Fatalf("seed %d: resets drawn without them", seed)
		}
		came := map[int]bool{}
		for _, r := range sc.Resets {
			resets++
			if r.Missed {
				missed++
			}
			if r.Back {
				back++
				came[r.Key] = true
			}
		}
		if len(sc.Resets) > 0 {
			with++
		}
		keep := func(rs []Request) []Request {
			return slices.DeleteFunc(slices.Clone(rs), func(r Request) bool { return came[r.Key] })
		}
		sc.Resets, sc.Requests, before.Requests = nil, keep(sc.Requests), keep(before.Requests)
		if !reflect.DeepEqual(sc, before) {
			t.Errorf("seed %d: the scenario changed beyond the traffic of the keys whose client came back", seed)
		}
	}
	if with < count/5 || with > count*2/5 || missed == 0 || back == 0 || missed == resets || back == resets {
		t.Errorf("%d of %d scenarios reset (%d resets, %d missed, %d the client came back)", with, count, resets, missed, back)
	}
}
