package protocol_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/share"
)

// Urgent says whether an op waiting to be sent has a request waiting on it:
// the runner sends those at once and gathers the others into fewer calls.
// A short request's ask is urgent, and so is a call's answer (the asker's
// request waits on it); growth asked before a request is short (a key over
// its limit refused alone) is not, nor is an ask already sent (a key's
// next op waits for its answer).
func TestAnOpIsUrgentWhenARequestWaitsOnIt(t *testing.T) {
	iv := testInterval
	for _, tc := range []struct {
		name   string
		make   func(h *heldGrant)
		urgent bool
		as     string // the setup's own op: "answered", or "as it is" (the over-limit rule's sequence sends it)
	}{
		{"nothing to send", func(*heldGrant) {}, false, "answered"},
		{"a short request's ask", func(h *heldGrant) {
			h.shortOfItsShare()
			_, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
			require.False(t, refuse)
		}, true, "answered"},
		{"its ask sent, not yet answered", func(h *heldGrant) {
			h.shortOfItsShare()
			h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
			require.Len(t, h.s.NextOps(h.now, 0), 1)
		}, false, "answered"},
		{"its ask sent, and another request short while it is on its way", func(h *heldGrant) {
			h.shortOfItsShare()
			h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
			require.Len(t, h.s.NextOps(h.now, 0), 1)
			h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
			require.True(t, h.s.Pending(), "queued behind the op on its way")
		}, false, "answered"},
		{"a call heard, its answer to send", func(h *heldGrant) {
			callAt := share.Micros(h.now)
			h.s.Heard(share.Contest{Key: h.key, Limit: h.lim, Epoch: h.epoch, CallAt: callAt, Expiry: callAt + 3_600_000_000}, h.now)
		}, true, "answered"},
		{"growth for a key over its limit, refused alone", func(h *heldGrant) {
			h.noRoom(false, false)
			require.True(t, h.refused(), "told no room: refused alone until its end")
			h.advance(3 * iv)
			h.shortOfItsShare()
			_, refuse, _ := h.s.Short(h.now, h.now, h.key, h.lim, 1, h.now+int64(time.Second), nil)
			require.True(t, refuse, "refused alone, an op asking for the next request")
		}, false, "as it is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeldGrant(t)
			if tc.as == "answered" {
				answerAll(h)
			}
			tc.make(h)
			assert.Equal(t, tc.urgent, h.s.Urgent(), "%s", h.s.Describe(h.key, h.lim))
			if tc.as == "as it is" {
				assert.True(t, h.s.Pending(), "an op to send, gathered")
			}
		})
	}
}

// answerAll sends what h's node has to send and answers it: its grant
// kept, nothing left to send.
func answerAll(h *heldGrant) {
	h.t.Helper()
	if ops := h.s.NextOps(h.now, 0); len(ops) > 0 {
		us := share.Micros(h.now)
		replies := make([]share.Reply, len(ops))
		for i := range replies {
			replies[i] = share.Reply{Outcome: share.Done, Epoch: h.epoch, Grant: share.One / 2, LeaseEnd: us + 10_000_000,
				Expiry: us + 3_600_000_000, Now: us}
		}
		h.s.OpsDone(ops, replies, nil, false, h.now)
	}
	require.False(h.t, h.s.Pending(), "nothing left to send")
}
