package protocol

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/share"
)

// One row per transition of docs/protocol.md's table ("A key's states on
// one node") that moves a key between states; the rows whose state stays
// (an ask, a lease renewed, a home's lease renewed) are ops, not
// transitions, and their tests drive Shares (home_test.go, beat_test.go).
func TestTransitionsFollowTheProtocolTable(t *testing.T) {
	whole := Input{Grant: share.One, Whole: true}
	part := Input{Grant: share.One / 4}
	calledSince := Input{Grant: share.One} // the whole key, but a call came while the op was on its way
	rows := []struct {
		row       string // protocol.md's from | event
		from      State
		ev        Event
		in        Input
		to        State
		effects   Effect
		unchanged bool // the event changes nothing in this state
	}{
		{row: "even | the store answers an ask", from: Even, ev: Granted, in: part, to: Held},
		{row: "even | the store answers an ask with nothing (the pool served it)", from: Even, ev: Granted, to: Empty},
		{row: "even | the registry announces a contest", from: Even, ev: Contest, to: Even, effects: Join},
		{row: "even | the node's first reading finds a contest", from: Even, ev: Announced, to: Empty, effects: HoldNothing},
		{row: "held | the store grows the grant", from: Held, ev: Granted, in: part, to: Held},
		{row: "held | a call on the key", from: Held, ev: Called, to: Held, effects: GiveBack},
		{row: "held | the store grants the whole key", from: Held, ev: Granted, in: whole, to: Home},
		{row: "held | the whole key, a call on its way", from: Held, ev: Granted, in: calledSince, to: Held},
		{row: "even | a request the pool serves makes its home", from: Even, ev: Granted, in: whole, to: Home},
		{row: "held (grant 0) | a request the pool serves makes its home", from: Empty, ev: Granted, in: whole, to: Home},
		{row: "held | idle for 3 intervals: an op gives everything back", from: Held, ev: Granted, to: Empty},
		{row: "held, home | idle for half a home lease: an op gives everything back", from: Home, ev: Granted, to: Empty},
		{row: "held, home | half a home lease passed, key in use: renewed whole", from: Home, ev: Granted, in: whole, to: Home},
		{row: "held, home | a call on the key", from: Home, ev: Called, to: Held, effects: GiveBack | HomeLost},
		{row: "held | the lease's end, less two intervals", from: Held, ev: Lapsed, to: Empty, effects: CountExpired | HoldNothing},
		{row: "held, home | the home lease's end, less two intervals", from: Home, ev: Lapsed, to: Empty, effects: CountExpired | HoldNothing},
		{row: "held | a heartbeat says the node was not in the fleet: every grant dropped", from: Held, ev: Lapsed, to: Empty, effects: CountExpired | HoldNothing},
		{row: "held, grant 0 | the contest's expiry passed", from: Empty, ev: ExpiryPassed, to: Even, effects: Release},
		{row: "held | the store says the contest is gone", from: Held, ev: Ended, to: Even, effects: Release},
		{row: "held, home | the store says the contest is gone", from: Home, ev: Ended, to: Even, effects: Release},
		{row: "held | the node leaves", from: Held, ev: Left, to: Empty},
		{row: "held, grant 0 | a call: nothing to give", from: Empty, ev: Called, unchanged: true},
		{row: "even | grants dropped: none held", from: Even, ev: Lapsed, unchanged: true},
		{row: "held, grant 0 | the lease's end: nothing held", from: Empty, ev: Lapsed, unchanged: true},
		{row: "held | the contest's expiry passes while a grant is held", from: Held, ev: ExpiryPassed, unchanged: true},
		{row: "held, home | a second announcement (not the first reading)", from: Home, ev: Announced, unchanged: true},
	}
	for _, r := range rows {
		t.Run(r.row, func(t *testing.T) {
			to, fx := Transition(r.from, r.ev, r.in)
			if r.unchanged {
				r.to = r.from
			}
			assert.Equal(t, r.to, to, "state")
			assert.Equal(t, r.effects, fx, "effects")
		})
	}
}

// Every state meets every event: the function is total, and what it
// returns keeps the machine's invariants.
func TestTransitionKeepsTheInvariants(t *testing.T) {
	inputs := []Input{{}, {Grant: 1}, {Grant: share.One}, {Grant: share.One, Whole: true}}
	judged := 0
	for st := State(0); st < numStates; st++ {
		for ev := Event(0); ev < numEvents; ev++ {
			for _, in := range inputs {
				to, fx := Transition(st, ev, in)
				name := fmt.Sprintf("%v %v %+v", st, ev, in)
				judged++
				assert.Less(t, to, numStates, name)
				if to == Home && st != Home {
					assert.True(t, ev == Granted && in.Whole && in.Grant > 0, "%s: only the store's whole grant makes a home", name)
				}
				if fx&Release != 0 {
					assert.Equal(t, Even, to, "%s: released into the even split", name)
				}
				if fx&(HoldNothing|CountExpired) != 0 {
					assert.False(t, to.holds(), "%s: holds nothing after", name)
				}
				if fx&CountExpired != 0 {
					assert.True(t, st.holds(), "%s: only a grant held expires", name)
				}
				if fx&GiveBack != 0 {
					assert.True(t, st.holds(), "%s: only a holder gives back", name)
				}
				if fx&HomeLost != 0 {
					assert.Equal(t, Home, st, name)
				}
				if ev == Called || ev == Lapsed || ev == ExpiryPassed || ev == Contest {
					assert.False(t, !st.contested() && to.contested(), "%s: only an answer of the store or a first reading of the registry makes a contest", name)
				}
			}
		}
	}
	assert.Equal(t, int(numStates)*int(numEvents)*len(inputs), judged)
}

// A key's grant follows its state (keyState.move): positive in Held and
// Home, zero in the others, whatever it held before.
func TestTheGrantFollowsTheState(t *testing.T) {
	for st := State(0); st < numStates; st++ {
		for ev := Event(0); ev < numEvents; ev++ {
			for _, in := range []Input{{}, {Grant: share.One / 3}, {Grant: share.One, Whole: true}} {
				ks := &keyState{state: st, epoch: 7}
				if st.holds() {
					ks.grant = share.One / 2
				}
				fx := ks.move(ev, in)
				assert.Equal(t, ks.state.holds(), ks.grant > 0, "%v %v %+v: state %v, grant %d", st, ev, in, ks.state, ks.grant)
				if fx&Release != 0 {
					assert.Zero(t, ks.epoch, "%v %v: released, no epoch", st, ev)
				}
			}
		}
	}
}
