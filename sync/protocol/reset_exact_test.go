package protocol_test

// A reply computed before a reset of the key, applied after the node
// forgave the key (Reset, or a reset heard), set deniedUntil to an exact
// Until of the state the reset discarded: the node refused alone until then
// on a key that is full again (found in review). A NoRoom, exact or not,
// to an op made before the key's last reset now refuses nothing: the
// requests it answers ask again, of the fresh state.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

func TestAnExactNoRoomFromBeforeAResetDoesNotOutliveIt(t *testing.T) {
	for _, exact := range []bool{false, true} {
		t.Run(map[bool]string{false: "not exact", true: "exact"}[exact], func(t *testing.T) {
			key, lim := "k", limit.Per(10, time.Minute) // one request every 6 s: a pooled key over 2 nodes
			s, _, now := newShortShares(t, 2, key, lim)
			_, refuse, _ := s.Short(now, now, key, lim, 1, now+int64(time.Second), nil)
			require.False(t, refuse)
			ops := s.NextOps(now, 0)
			require.Len(t, ops, 1)
			// The store applied the op (no room for 6 s, nobody else
			// holds any), then the key was reset; the node learns of the
			// reset before the op's answer comes back.
			at := now + int64(time.Millisecond)
			s.Reset(at, key, lim, at)
			until := share.Micros(now) + 6_000_000
			s.OpsDone(ops, []share.Reply{{Outcome: share.NoRoom, Epoch: share.Micros(now), Expiry: share.Micros(now) + 3_600_000_000,
				Until: until, Exact: exact, Now: share.Micros(now)}}, nil, false, at)
			// A second on, the key is full (reset), and a request comes.
			later := at + int64(time.Second)
			s.Tick(later)
			_, refuse, _ = s.Short(later, later, key, lim, 1, later+int64(time.Second), nil)
			assert.False(t, refuse, "refused alone a second after the key was reset, on the state before it")
		})
	}
}

// A no-room answer to an op made before the key was reset is of the state
// before: it refuses nothing after the reset, and the request it answers
// asks again, of the fresh state. (Under load, the node that reset a key a
// probe was in flight on refused its first request after the reset, and
// the others kept refusing: TestResetAsync, make test-under-load.)
func TestANoRoomAnswerFromBeforeAResetRefusesNothing(t *testing.T) {
	h := newHeldGrant(t)
	h.shortOfItsShare()
	w, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
	require.False(t, refuse)
	ops := h.s.NextOps(h.now, 0)
	require.Len(t, ops, 1)
	h.now += int64(time.Millisecond)
	h.s.Reset(h.now, h.key, h.lim, h.now)
	us := share.Micros(h.now)
	h.s.OpsDone(ops, []share.Reply{{Outcome: share.NoRoom, Epoch: h.epoch, Grant: share.One / 2, LeaseEnd: us + 10_000_000,
		Expiry: us + 3_600_000_000, Until: us + 500_000, Now: us}}, nil, false, h.now)
	select {
	case <-w.Done():
	default:
		t.Fatal("the waiting request is not released")
	}
	v, _ := w.Verdict()
	assert.Equal(t, protocol.Retry, v, "released to decide again, not refused")
	h.shortOfItsShare()
	w, refuse, _ = h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
	assert.False(t, refuse, "not refused: the answer was of the state before the reset (%s)", h.s.Describe(h.key, h.lim))
	assert.NotNil(t, w)
	assert.Len(t, h.s.NextOps(h.now, 0), 1, "it asks again")
}

// An op says which resets of its key its state is from after
// (share.Op.ResetHeard): before the node made or heard of one, only those
// older than an active window (the registry no longer holds them); after,
// the latest. The store takes the state of an op from before the contest's
// last reset as fresh: were the reset the node made not in its next op, a
// give of its state, fresh after the reset, would be taken as fresh again.
func TestAnOpSaysWhichResetsItHeard(t *testing.T) {
	h := newHeldGrant(t)
	h.shortOfItsShare()
	_, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
	require.False(t, refuse)
	ops := h.s.NextOps(h.now, 0)
	require.Len(t, ops, 1)
	us := share.Micros(h.now)
	assert.Less(t, ops[0].ResetHeard, us, "no reset heard: only those older than an active window")
	assert.GreaterOrEqual(t, ops[0].ResetHeard, us-share.Duration(time.Minute), "every reset older than an active window")
	h.now += int64(time.Millisecond)
	h.s.Reset(h.now, h.key, h.lim, h.now)
	reset := share.Micros(h.now)
	h.s.OpsDone(ops, []share.Reply{{Outcome: share.NoRoom, Epoch: h.epoch, Grant: share.One / 2, LeaseEnd: us + 10_000_000,
		Expiry: us + 3_600_000_000, Until: us + 500_000, Now: us}}, nil, false, h.now)
	h.shortOfItsShare()
	_, refuse, _ = h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
	require.False(t, refuse)
	ops = h.s.NextOps(h.now, 0)
	require.Len(t, ops, 1)
	assert.Equal(t, reset, ops[0].ResetHeard, "the reset it made")
}

// A node that answered another node's call on a key with its state from
// before a reset it had not heard of yet (spent: nothing to spare) answers
// the call again once it hears of the reset, with the fresh state. Before,
// the asker was refused while this node held the key fresh and admitted
// its whole burst alone (TestResetAsync on a busy machine: the resetting
// node's first request refused).
func TestACallAnsweredBeforeAResetIsAnsweredAgainAfterIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		callAt  func(reset int64) int64
		answers bool
	}{
		{"a call after the reset", func(r int64) int64 { return r + 100 }, true},
		{"a call before the reset", func(r int64) int64 { return r - 100 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeldGrant(t)
			h.spend()
			h.advance(testInterval)
			h.spend() // its demand goes on, beyond its share's refill
			us := share.Micros(h.now)
			reset := us + 1_000
			callAt := tc.callAt(reset)
			h.s.Heard(share.Contest{Key: h.key, Limit: h.lim, Epoch: h.epoch, CallAt: callAt, Expiry: us + 3_600_000_000}, h.now)
			ops := h.s.NextOps(h.now, 0)
			require.Len(t, ops, 1, "the call is answered")
			require.Equal(t, ops[0].Held, ops[0].Keep, "spent: nothing to spare: %+v (%s)", ops[0], h.s.Describe(h.key, h.lim))
			require.Less(t, ops[0].ResetHeard, reset, "not heard of the reset yet")
			h.s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Epoch: h.epoch, Grant: ops[0].Keep, LeaseEnd: us + 10_000_000,
				Expiry: us + 3_600_000_000, Now: us}}, nil, false, h.now)
			h.now += int64(testInterval)
			h.s.Heard(share.Contest{Key: h.key, Limit: h.lim, Reset: reset, Expiry: reset + 1_000_000}, h.now)
			ops = h.s.NextOps(h.now, 0)
			if !tc.answers {
				assert.Empty(t, ops, "a call the reset made moot: the next ask calls again")
				return
			}
			require.Len(t, ops, 1, "the call is answered again (%s)", h.s.Describe(h.key, h.lim))
			assert.Equal(t, reset, ops[0].ResetHeard)
			assert.Less(t, ops[0].Keep, ops[0].Held, "fresh: it has room to spare")
		})
	}
}

// The registry keeps a contest's last reset on its entry for the
// contest's life, and hands it back with every change to the entry (every
// call), long after the node swept its own record of the reset (an active
// window on). Applied again, every node restarted the key on every call:
// the fleet admitted half as much again as the limit (the simulation's
// seed 366 with resets: a fixed window over its limit). A reset is applied
// once; one older than an active window is not applied at all.
func TestAResetHeardAgainIsNotAppliedAgain(t *testing.T) {
	h := newHeldGrant(t)
	reset := share.Micros(h.now) + 1_000
	entry := func(callAt int64) share.Contest {
		return share.Contest{Key: h.key, Limit: h.lim, Epoch: h.epoch, CallAt: callAt, Reset: reset, Expiry: reset + 3_600_000_000}
	}
	h.now += int64(2 * time.Millisecond)
	h.s.Heard(entry(0), h.now)
	require.Equal(t, uint64(1), h.s.Stats().Resets, "the reset is applied once")
	h.spend()
	h.s.Heard(entry(share.Micros(h.now)), h.now) // a call: the entry again, with the reset
	assert.Equal(t, uint64(1), h.s.Stats().Resets, "not again with the next call")
	h.advance(2 * time.Minute) // past the active window: the node sweeps its record of the reset
	h.spend()
	h.s.Heard(entry(share.Micros(h.now)), h.now)
	assert.Equal(t, uint64(1), h.s.Stats().Resets, "not again an active window on")
	_, err := h.eng.AllowN(h.now, h.key, h.lim, 1)
	assert.Error(t, err, "the share it spent since stays spent")
}

// The store says, in every reply, when the contest was last reset
// (share.Reply.Reset): a node that has not heard of it yet starts its
// state afresh before it applies the reply, rather than a beat or so later
// when the registry tells it. Before, what such a node admitted out of
// room the fresh pool gave it was forgotten when it heard (it restarts its
// whole share then): the fleet admitted more than the capacity afresh.
func TestAReplyTellsTheNodeOfAReset(t *testing.T) {
	h := newHeldGrant(t)
	h.spend()
	_, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
	require.False(t, refuse)
	ops := h.s.NextOps(h.now, 0)
	require.Len(t, ops, 1)
	us := share.Micros(h.now)
	reset := us - 500
	require.Less(t, ops[0].ResetHeard, reset, "the node has not heard of the reset")
	h.s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Epoch: h.epoch, Grant: share.One / 2, LeaseEnd: us + 10_000_000,
		Expiry: us + 3_600_000_000, Now: us, Reset: reset}}, nil, false, h.now)
	assert.Equal(t, uint64(1), h.s.Stats().Resets, "it started the key afresh")
	admitted := 0
	for range 100 {
		if _, err := h.eng.AllowN(h.now, h.key, h.lim, 1); err == nil {
			admitted++
		}
	}
	assert.GreaterOrEqual(t, admitted, 45, "its half of the key is fresh: about 50 of a burst of 100")
	h.shortOfItsShare()
	_, refuse, _ = h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
	require.False(t, refuse)
	ops = h.s.NextOps(h.now, 0)
	require.Len(t, ops, 1)
	assert.Equal(t, reset, ops[0].ResetHeard, "its ops say it heard of the reset")
}
