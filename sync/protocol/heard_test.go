package protocol_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// An op of a node that refuses requests alone for want of room (the store
// told it no room until later) says the latest call it had heard
// (share.Op.Heard): it answers that call with nothing to spare, and the
// store, once every holder has so answered, tells the asker no room at
// once instead of keeping it waiting out the call's window (a key over its
// limit on every node: each request beyond a node's share waited 40 ms to
// be refused). A node with room to spare says nothing: what it keeps for
// its demand may go unused, and the asker waits for the fleet as before.
// An op in flight when the call is heard answers nothing.
func TestAnOpSaysWhichCallItAnswersWhenItsNodeIsShortOfRoom(t *testing.T) {
	for _, tc := range []struct {
		name  string
		short bool // the node spends its whole grant and is told no room
	}{
		{"a node with room to spare", false},
		{"a node refusing alone", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, lim := "k", limit.PerSecond(100).WithBurst(100).Canonical()
			s, eng, now, epoch := homeAt(t, key, lim)
			us := share.Micros(now)
			if tc.short {
				for range 1000 { // a home refuses alone past its burst; a grant is short
					if res, err := eng.AllowN(now, key, lim, 1); err != nil || !res.Allowed {
						break
					}
				}
				_, refuse, _ := s.Short(now, now, key, lim, 1, now+int64(time.Second), nil)
				require.False(t, refuse)
				ops := s.NextOps(now, 0)
				require.Len(t, ops, 1)
				assert.Zero(t, ops[0].Heard, "no call heard yet")
				s.OpsDone(ops, []share.Reply{{Outcome: share.NoRoom, Epoch: epoch, Grant: share.One, LeaseEnd: us + 1_000_000,
					Expiry: us + 3_600_000_000, Until: us + 500_000, Now: us}}, nil, false, now)
				_, refuse, _ = s.Short(now, now, key, lim, 1, now+int64(time.Second), nil)
				require.True(t, refuse, "told no room, the node refuses alone")
			}
			// Another node calls.
			callAt := us + 100
			s.Heard(share.Contest{Key: key, Limit: lim, Epoch: epoch, CallAt: callAt, Expiry: callAt + 3_600_000_000}, now)
			answer := s.NextOps(now, 0)
			require.Len(t, answer, 1, "the call is answered")
			if tc.short {
				assert.Equal(t, callAt, answer[0].Heard, "the answer names the call it answers with nothing to spare")
			} else {
				assert.Zero(t, answer[0].Heard, "room to spare: the answer names no call")
				assert.Less(t, answer[0].Keep, int64(share.One), "and gives back what it spares")
			}
		})
	}
}
