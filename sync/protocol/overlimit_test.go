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
// limit waited on Redis. Where the store's answer was exact (nobody else
// holds any: only the refill brings room) or is older than ten intervals,
// a short request asks and waits, as before.
func TestAShortRequestOfAKeyOverItsLimitIsRefusedAloneWhileAnOpAsks(t *testing.T) {
	iv := testInterval
	for _, tc := range []struct {
		name  string
		exact bool
		after time.Duration // from the no-room answer to the next short request
		alone bool          // refused alone, an op asking for the next request
	}{
		{"others held grants, three intervals on", false, 3 * iv, true},
		{"others held grants, nine intervals on", false, 9 * iv, true},
		{"others held grants, eleven intervals on", false, 11 * iv, false},
		{"nobody else held any (exact), past its end", true, 3 * iv, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeldGrant(t)
			h.spend()
			deadline := h.now + int64(time.Second)
			_, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, deadline, nil)
			require.False(t, refuse)
			ops := h.s.NextOps(h.now, 0)
			require.Len(t, ops, 1)
			us := share.Micros(h.now)
			until := us + 2*share.Duration(iv) // room two intervals on, as far as the store knows
			h.s.OpsDone(ops, []share.Reply{{Outcome: share.NoRoom, Epoch: h.epoch, Grant: share.One / 2, LeaseEnd: us + 10_000_000,
				Expiry: us + 3_600_000_000, Until: until, Exact: tc.exact, Now: us}}, nil, false, h.now)
			require.True(t, h.refused(), "told no room: refused alone until its end")

			h.advance(tc.after)
			if _, err := h.eng.AllowN(h.now, h.key, h.lim, 1); !errors.Is(err, local.ErrShort) {
				h.spend() // the grant's refill admitted some: short again
			}
			w, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
			ops = h.s.NextOps(h.now, 0)
			require.Len(t, ops, 1, "an op asks the store either way (%s)", h.s.Describe(h.key, h.lim))
			assert.Equal(t, int64(1), ops[0].Want, "for one request")
			if !tc.alone {
				assert.False(t, refuse, "the request waits for the answer")
				assert.NotNil(t, w)
				return
			}
			assert.True(t, refuse, "refused alone, not kept waiting on the store")
			assert.Equal(t, ops[0].Held, ops[0].Keep, "the op keeps all the node holds")

			// The store grows the node's share: the next request is decided
			// from memory.
			us = share.Micros(h.now)
			h.s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Epoch: h.epoch, Grant: share.One/2 + share.One/4, Growth: share.One / 4,
				LeaseEnd: us + 10_000_000, Expiry: us + 3_600_000_000, Now: us}}, nil, false, h.now)
			res, err := h.eng.AllowN(h.now, h.key, h.lim, 1)
			require.NoError(t, err, "the growth admits the next request in memory")
			assert.True(t, res.Allowed)
		})
	}
}
