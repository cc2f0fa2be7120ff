package protocol_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/share"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// An op of a node short of room itself (told no room until later, or its
// latest request of the key refused for want of room) names the latest
// call it had heard (share.Op.Heard): it answers that call with nothing to
// spare, and the store, once every holder has so answered, tells the asker
// no room at once instead of keeping it waiting out the call's window (a
// key over its limit on every node: each request beyond a node's share
// waited 40 ms to be refused). A node with room to spare names no call:
// what it keeps for its demand may go unused, and the asker waits as
// before.
func TestAnOpSaysWhichCallItAnswersWhenItsNodeIsShortOfRoom(t *testing.T) {
	for _, tc := range []struct {
		name  string
		short func(h *heldGrant) // what the node goes through before the call
		heard bool
	}{
		{"room to spare", func(*heldGrant) {}, false},
		{"told no room, a request admitted since in its grant's refill", func(h *heldGrant) {
			h.spend()
			h.ask(share.NoRoom, h.now+int64(500*time.Millisecond), time.Second)
			require.True(t, h.refused(), "told no room, it refuses alone")
			h.advance(testInterval + testInterval/2) // 1.5 requests of its half refilled; told no room for two intervals
			h.admit()
		}, true},
		{"its latest request ran out its wait", func(h *heldGrant) {
			h.spend()
			h.ask(share.Wait, 0, 2*testInterval)
			h.advance(3 * testInterval) // the waiter's deadline passes
		}, true},
		{"its latest request ran out its wait, one admitted since", func(h *heldGrant) {
			h.spend()
			h.ask(share.Wait, 0, 2*testInterval)
			h.advance(3 * testInterval)
			h.advance(testInterval)
			h.admit()
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeldGrant(t)
			tc.short(h)
			callAt := share.Micros(h.now) + 100
			h.s.Heard(share.Contest{Key: h.key, Limit: h.lim, Epoch: h.epoch, CallAt: callAt, Expiry: callAt + 3_600_000_000}, h.now)
			var answer *share.Op
			for _, op := range h.s.NextOps(h.now, 0) {
				if op.Key == h.key {
					answer = &op
				}
			}
			require.NotNil(t, answer, "the call is answered (%s)", h.s.Describe(h.key, h.lim))
			if tc.heard {
				assert.Equal(t, callAt, answer.Heard, "short of room: the answer names the call")
			} else {
				assert.Zero(t, answer.Heard, "room to spare: the answer names no call")
			}
		})
	}
}

// heldGrant is a node holding half of a key's contest (100/s: 50/s, burst
// 50).
type heldGrant struct {
	t     *testing.T
	s     *protocol.Shares
	eng   *local.Engine
	key   string
	lim   limit.Limit
	epoch int64
	now   int64
}

func newHeldGrant(t *testing.T) *heldGrant {
	key, lim := "k", limit.PerSecond(100)
	s, eng, now := newShortShares(t, 2, key, lim)
	h := &heldGrant{t: t, s: s, eng: eng, key: key, lim: lim, now: now, epoch: share.Micros(now)}
	_, refuse, _ := s.Short(now, now, key, lim, 1, now+int64(time.Second), nil)
	require.False(t, refuse)
	ops := s.NextOps(now, 0)
	require.Len(t, ops, 1)
	us := share.Micros(now)
	s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Epoch: h.epoch, Grant: share.One / 2, // its even split, kept
		LeaseEnd: us + 10_000_000, Expiry: us + 3_600_000_000, Now: us}}, nil, false, now)
	h.advance(time.Second) // its half full again
	return h
}

// advance moves the clock on by d, the node beating and sweeping then (it
// decides in its grants while its heartbeats succeed).
func (h *heldGrant) advance(d time.Duration) {
	h.now += int64(d)
	h.s.BeatDone(h.s.NextBeat(h.now), &share.BeatReply{Now: share.Micros(h.now), Nodes: 2}, nil, h.now)
	h.s.Tick(h.now)
}

// spend spends the grant until a request is short.
func (h *heldGrant) spend() {
	for range 200 {
		if _, err := h.eng.AllowN(h.now, h.key, h.lim, 1); errors.Is(err, local.ErrShort) {
			return
		}
	}
	h.t.Fatal("never short")
}

// ask makes a short request ask, waiting at most wait, answered outcome
// (until, for NoRoom); told to wait, it waits on (as Limiter.ask does:
// released to decide again, still short, it asks again).
func (h *heldGrant) ask(outcome share.Outcome, until int64, wait time.Duration) {
	deadline := h.now + int64(wait)
	_, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, deadline, nil)
	require.False(h.t, refuse)
	ops := h.s.NextOps(h.now, 0)
	require.Len(h.t, ops, 1)
	us := share.Micros(h.now)
	h.s.OpsDone(ops, []share.Reply{{Outcome: outcome, Epoch: h.epoch, Grant: share.One / 2, LeaseEnd: us + 10_000_000,
		Expiry: us + 3_600_000_000, Until: share.Micros(until), Now: us}}, nil, false, h.now)
	if outcome == share.Wait {
		_, refuse, _ = h.s.Short(h.now, h.now, h.key, h.lim, 1, deadline, nil)
		require.False(h.t, refuse)
	}
}

// refused reports whether a short request is refused at once.
func (h *heldGrant) refused() bool {
	_, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
	return refuse
}

// admit admits a request in the grant.
func (h *heldGrant) admit() {
	res, err := h.eng.AllowN(h.now, h.key, h.lim, 1)
	require.NoError(h.t, err)
	require.True(h.t, res.Allowed)
}
