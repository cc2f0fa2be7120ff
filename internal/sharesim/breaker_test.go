package sharesim

import (
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// TestSimBreakerGenerations holds the simulated breaker to package
// breaker's (gobreaker's two-step breaker): a call's outcome counts only in
// the generation that let it through. Seed 207798 failed the bound because
// a call let through before its node's breaker opened, held by a paused
// store and answered after it opened, closed it: that node went back to
// its whole-key home while the others stayed degraded in an even split
// each for OpenFor, which the real breaker never does.
func TestSimBreakerGenerations(t *testing.T) {
	fail := errors.New("timed out")
	type step struct {
		at   time.Duration
		call string // a name for a call to let through now, if allowed
		done string // the call whose outcome comes now
		err  error
	}
	cases := []struct {
		name     string
		steps    []step
		open     bool          // the breaker's state after the steps
		openTill time.Duration // while open
	}{
		{
			name: "a call let through before it opened succeeds after: still open",
			steps: []step{
				{at: 0, call: "a"}, {at: 0, call: "b"}, {at: 0, call: "c"}, {at: 10 * time.Millisecond, call: "late"},
				{at: 100 * time.Millisecond, done: "a", err: fail},
				{at: 100 * time.Millisecond, done: "b", err: fail},
				{at: 100 * time.Millisecond, done: "c", err: fail},
				{at: 105 * time.Millisecond, done: "late"},
			},
			open: true, openTill: 100*time.Millisecond + openFor,
		},
		{
			name: "a call let through before it opened fails after: OpenFor not moved",
			steps: []step{
				{at: 0, call: "a"}, {at: 0, call: "b"}, {at: 0, call: "c"}, {at: 10 * time.Millisecond, call: "late"},
				{at: 100 * time.Millisecond, done: "a", err: fail},
				{at: 100 * time.Millisecond, done: "b", err: fail},
				{at: 100 * time.Millisecond, done: "c", err: fail},
				{at: 110 * time.Millisecond, done: "late", err: fail},
			},
			open: true, openTill: 100*time.Millisecond + openFor,
		},
		{
			name: "the probe succeeds: closed",
			steps: []step{
				{at: 0, call: "a"}, {at: 0, call: "b"}, {at: 0, call: "c"},
				{at: 100 * time.Millisecond, done: "a", err: fail},
				{at: 100 * time.Millisecond, done: "b", err: fail},
				{at: 100 * time.Millisecond, done: "c", err: fail},
				{at: 100*time.Millisecond + openFor, call: "probe"},
				{at: 101*time.Millisecond + openFor, done: "probe"},
			},
		},
		{
			name: "the probe fails: open for OpenFor again",
			steps: []step{
				{at: 0, call: "a"}, {at: 0, call: "b"}, {at: 0, call: "c"},
				{at: 100 * time.Millisecond, done: "a", err: fail},
				{at: 100 * time.Millisecond, done: "b", err: fail},
				{at: 100 * time.Millisecond, done: "c", err: fail},
				{at: 100*time.Millisecond + openFor, call: "probe"},
				{at: 200*time.Millisecond + openFor, done: "probe", err: fail},
			},
			open: true, openTill: 200*time.Millisecond + 2*openFor,
		},
		{
			name: "closed: a success clears the failures before it",
			steps: []step{
				{at: 0, call: "a"}, {at: 0, call: "b"}, {at: 0, call: "c"}, {at: 0, call: "d"},
				{at: 100 * time.Millisecond, done: "a", err: fail},
				{at: 100 * time.Millisecond, done: "b", err: fail},
				{at: 101 * time.Millisecond, done: "c"},
				{at: 102 * time.Millisecond, done: "d", err: fail},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eng, err := local.New(local.Config{Shards: 1, TrackSpend: true, Asks: true})
			if err != nil {
				t.Fatal(err)
			}
			nd := &node{s: &sim{}, eng: eng}
			gens := map[string]int64{}
			for _, st := range tc.steps {
				nd.s.now = st.at
				if st.call != "" {
					gen, ok := nd.allow()
					if !ok {
						t.Fatalf("at %v: call %s not let through", st.at, st.call)
					}
					gens[st.call] = gen
				}
				if st.done != "" {
					nd.result(gens[st.done], st.err)
				}
			}
			if nd.open != tc.open || nd.eng.Degraded() != tc.open {
				t.Fatalf("open %v, engine degraded %v; want %v", nd.open, nd.eng.Degraded(), tc.open)
			}
			if tc.open && nd.openTill != tc.openTill {
				t.Errorf("open until %v, want %v", nd.openTill, tc.openTill)
			}
			if tc.open {
				nd.s.now = tc.openTill - time.Millisecond
				if _, ok := nd.allow(); ok {
					t.Errorf("a call let through at %v, before the breaker's OpenFor passed", nd.s.now)
				}
			}
		})
	}
}
