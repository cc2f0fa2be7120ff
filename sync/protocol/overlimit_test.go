package protocol_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/share"
)

// A key over its limit costs its requests no wait on the store: once the
// store has said the fleet has no room while other nodes held grants of it
// (a NoRoom not Exact), a request short of the node's share is refused
// alone for the next ten intervals, and an op asks for room for the next
// request instead (growth, decided in from memory). Before, each request
// past the no-room's end waited for its own ask: in W1 (100,000 keys, 10/s
// burst 10 each, 4 nodes) a quarter of the decisions of keys over their
// limit waited on Redis. Where the store's latest no-room was exact
// (nobody else holds any: only the refill brings room), where it answered
// an op made before the key was reset, or once ten intervals have passed,
// a short request asks and waits, as before; so does one after the
// contest ended.
func TestAShortRequestOfAKeyOverItsLimitIsRefusedAloneWhileAnOpAsks(t *testing.T) {
	iv := testInterval
	for _, tc := range []struct {
		name   string
		exact  bool
		before func(h *heldGrant) // between the no-room answer and the clock's advance
		after  time.Duration      // from the no-room answer to the next short request
		alone  bool               // refused alone, an op asking for the next request
	}{
		{"others held grants, three intervals on", false, nil, 3 * iv, true},
		{"others held grants, nine intervals on", false, nil, 9 * iv, true},
		{"others held grants, ten intervals on", false, nil, 10 * iv, false},
		{"others held grants, eleven intervals on", false, nil, 11 * iv, false},
		{"nobody else held any (exact), past its end", true, nil, 3 * iv, false},
		{"an exact no-room after one that was not", false, func(h *heldGrant) {
			h.advance(3 * iv)
			h.noRoom(true, false)
		}, 3 * iv, false},
		{"a no-room answering an op made before a reset", false, func(h *heldGrant) {
			h.advance(3 * iv)
			h.noRoom(false, true)
		}, 3 * iv, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeldGrant(t)
			h.noRoom(tc.exact, false)
			require.True(t, h.refused(), "told no room: refused alone until its end")
			if tc.before != nil {
				tc.before(h)
			}
			h.advance(tc.after)
			h.shortOfItsShare()
			w, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
			ops := h.s.NextOps(h.now, 0)
			require.Len(t, ops, 1, "an op asks the store either way (%s)", h.s.Describe(h.key, h.lim))
			assert.Equal(t, int64(1), ops[0].Want, "for one request")
			if !tc.alone {
				assert.False(t, refuse, "the request waits for the answer")
				assert.NotNil(t, w)
				return
			}
			assert.True(t, refuse, "refused alone, not kept waiting on the store")
			assert.Equal(t, ops[0].Held, ops[0].Keep, "the op keeps all the node holds")
			assert.False(t, ops[0].Serve, "the pool serves no request nobody waits for")

			// The store grows the node's share: the next request is decided
			// from memory; once that room is spent, the next short request
			// is refused alone again (a key over its limit is given room
			// whenever the pool refills: it stays over its limit until ten
			// intervals pass without a no-room answer).
			us := share.Micros(h.now)
			h.s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Epoch: h.epoch, Grant: share.One/2 + share.One/4, Growth: share.One / 4,
				LeaseEnd: us + 10_000_000, Expiry: us + 3_600_000_000, Now: us}}, nil, false, h.now)
			res, err := h.eng.AllowN(h.now, h.key, h.lim, 1)
			require.NoError(t, err, "the growth admits the next request in memory")
			assert.True(t, res.Allowed)
			h.spend()
			_, refuse, _ = h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
			assert.True(t, refuse, "after the fleet gave room, within the ten intervals, refused alone again")
		})
	}
}

// The rule's end with the contest's: a no-room answer, then the contest
// ends (the store answers Ended, here to the node's answer to a call,
// while it still refuses alone): the key is the fleet's even split again,
// and a request short of it, once the refusal's end has passed (before the
// next sweep), asks and waits.
func TestAKeyOverItsLimitWhoseContestEndsAsksAgain(t *testing.T) {
	h := newHeldGrant(t)
	h.noRoom(false, false)
	callAt := share.Micros(h.now) + 100
	h.s.Heard(share.Contest{Key: h.key, Limit: h.lim, Epoch: h.epoch, CallAt: callAt, Expiry: callAt + 3_600_000_000}, h.now)
	ops := h.s.NextOps(h.now, 0)
	require.Len(t, ops, 1, "the call's answer")
	h.s.OpsDone(ops, []share.Reply{{Outcome: share.Ended, Now: share.Micros(h.now)}}, nil, false, h.now)
	h.now += int64(3 * testInterval) // past the refusal's end, no sweep yet
	h.shortOfItsShare()
	w, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
	assert.False(t, refuse, "its even split again: a short request waits for its ask (%s)", h.s.Describe(h.key, h.lim))
	assert.NotNil(t, w)
}

// noRoom makes a short request ask (or, refused alone under the rule, its
// op ask for the next) and answers the op NoRoom until two intervals on,
// exact or not; reset: the key is reset while the op is on its way.
func (h *heldGrant) noRoom(exact, reset bool) {
	h.t.Helper()
	h.shortOfItsShare()
	h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
	ops := h.s.NextOps(h.now, 0)
	require.Len(h.t, ops, 1)
	if reset {
		h.s.Reset(h.now, h.key, h.lim, h.now)
	}
	us := share.Micros(h.now)
	h.s.OpsDone(ops, []share.Reply{{Outcome: share.NoRoom, Epoch: h.epoch, Grant: share.One / 2, LeaseEnd: us + 10_000_000,
		Expiry: us + 3_600_000_000, Until: us + 2*share.Duration(testInterval), Exact: exact, Now: us}}, nil, false, h.now)
}

// shortOfItsShare spends the node's share until a request is short.
func (h *heldGrant) shortOfItsShare() {
	if _, err := h.eng.AllowN(h.now, h.key, h.lim, 1); !errors.Is(err, local.ErrShort) {
		h.spend()
	}
}
