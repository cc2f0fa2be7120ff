package protocol_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// A node that meets a call made after a reset, in a contest it had not
// joined, answers it with its join; while the join is on its way it holds
// no grant yet. Hearing of the reset then, it restarts its split fresh,
// and the join's reply makes that split its grant: the call must be
// answered again, with the fresh split, as a grant holder's is
// (TestACallAnsweredBeforeAResetIsAnsweredAgainAfterIt). Before, only a
// node holding a grant answered again: the asker was told no room while
// this node held its split fresh.
//
// Here the node decides the key in its even split, spent, with demand; a
// contest begins after a reset (another node's call, CallAt after it); the
// node joins, keeping everything (nothing to spare in a spent split); it
// hears of the reset before the join's answer comes back.
func TestAJoinAnsweredBeforeAResetIsAnsweredAgainAfterIt(t *testing.T) {
	key, lim := "k", limit.PerSecond(100)
	s, _, now := newShortShares(t, 2, key, lim)
	us := share.Micros(now)
	reset := us + 1_000
	epoch := reset + 100
	s.Heard(share.Contest{Key: key, Limit: lim, Epoch: epoch, CallAt: epoch, Expiry: us + 3_600_000_000}, now)
	ops := s.NextOps(now, 0)
	require.Len(t, ops, 1, "the contest is joined (%s)", s.Describe(key, lim))
	require.Zero(t, ops[0].Epoch, "a join")
	require.Equal(t, ops[0].Held, ops[0].Keep, "spent: nothing to spare: %+v", ops[0])
	require.Less(t, ops[0].ResetHeard, reset, "not heard of the reset yet")

	now += int64(testInterval)
	s.Heard(share.Contest{Key: key, Limit: lim, Reset: reset, Expiry: reset + 1_000_000}, now)
	s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Epoch: epoch, Grant: ops[0].Keep, LeaseEnd: us + 10_000_000,
		Expiry: us + 3_600_000_000, Now: us}}, nil, false, now)
	ops = s.NextOps(now, 0)
	require.Len(t, ops, 1, "the call is answered again, with the fresh split (%s)", s.Describe(key, lim))
	assert.Equal(t, reset, ops[0].ResetHeard)
	assert.Less(t, ops[0].Keep, ops[0].Held, "fresh: it has room to spare")
}

// The same with a node holding a grant whose answer to the call is on its
// way when it hears of the reset: the answer is given again once the
// first is answered.
func TestAnAnswerOnItsWayWhenAResetIsHeardIsGivenAgain(t *testing.T) {
	h := newHeldGrant(t)
	h.spend()
	h.advance(testInterval)
	h.spend()
	us := share.Micros(h.now)
	reset := us + 1_000
	h.s.Heard(share.Contest{Key: h.key, Limit: h.lim, Epoch: h.epoch, CallAt: reset + 100, Expiry: us + 3_600_000_000}, h.now)
	ops := h.s.NextOps(h.now, 0)
	require.Len(t, ops, 1)
	require.Equal(t, ops[0].Held, ops[0].Keep)
	h.now += int64(testInterval)
	h.s.Heard(share.Contest{Key: h.key, Limit: h.lim, Reset: reset, Expiry: reset + 1_000_000}, h.now)
	h.s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Epoch: h.epoch, Grant: ops[0].Keep, LeaseEnd: us + 10_000_000,
		Expiry: us + 3_600_000_000, Now: us}}, nil, false, h.now)
	ops = h.s.NextOps(h.now, 0)
	require.Len(t, ops, 1, "(%s)", h.s.Describe(h.key, h.lim))
	assert.Less(t, ops[0].Keep, ops[0].Held)
}

// An op's ResetHeard never falls below a reset the node heard, even once
// the node swept its record of it (an active window on) and Redis's clock,
// as the node maps it, stepped back (a failover to a replica whose clock is
// behind: clock.Offset applies such a step at once). Resting on the clock
// alone, the op said it had not heard of the reset, and the store took its
// state, spent since the node restarted it, for one from before the reset
// and returned it fresh: spend forgotten, admitted again.
func TestAnOpNeverSaysItMissedAResetItHeard(t *testing.T) {
	h := newHeldGrant(t)
	us := share.Micros(h.now)
	reset := us + 1_000
	h.now += int64(2 * time.Millisecond)
	h.s.Heard(share.Contest{Key: h.key, Limit: h.lim, Reset: reset, Expiry: reset + 1_000_000}, h.now)
	for range 30 { // an active window and more (1 s by default), the node beating and sweeping
		h.advance(100 * time.Millisecond)
	}
	h.now -= int64(3 * time.Second) // Redis's clock, as mapped, stepped back (a failover)
	h.shortOfItsShare()
	_, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
	require.False(t, refuse)
	ops := h.s.NextOps(h.now, 0)
	require.Len(t, ops, 1)
	assert.GreaterOrEqual(t, ops[0].ResetHeard, reset, "the node heard of the reset at %d and started afresh: %+v", reset, ops[0])
}
