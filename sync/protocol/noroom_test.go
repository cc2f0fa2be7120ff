package protocol_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// A node told no room asks again before the store's Until only when the
// room may come sooner: a holder may give some back (within two intervals,
// while not refused over and over; the request that finds the refusal
// ended is refused alone, the op asking for room for the next:
// TestAShortRequestOfAKeyOverItsLimitIsRefusedAloneWhileAnOpAsks). When the store says its Until is exact
// (nobody else holds any of the key: only the refill brings room), the node
// refuses alone until then, at no cost to the store: a key over its limit on
// every node asked the store every two intervals a node (in the per-client
// round-robin workload, 22,000 of 61,000 no-room answers were exact).
func TestANodeToldNoRoomAsksAgainOnlyWhenRoomMayComeSooner(t *testing.T) {
	const iv = int64(testInterval)
	for _, tc := range []struct {
		name  string
		exact bool
		asks  bool // asks again three intervals on, before Until
	}{
		{"a holder may give room back", false, true},
		{"only the refill brings room", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, lim := "k", limit.PerSecond(10)
			s, _, now := newShortShares(t, 2, key, lim)
			_, refuse, _ := s.Short(now, now, key, lim, 1, now+int64(time.Second), nil)
			require.False(t, refuse)
			ops := s.NextOps(now, 0)
			require.Len(t, ops, 1)
			until := share.Micros(now) + 500_000 // half a second on
			s.OpsDone(ops, []share.Reply{{Outcome: share.NoRoom, Epoch: share.Micros(now), Expiry: share.Micros(now) + 3_600_000_000,
				Until: until, Exact: tc.exact, Now: share.Micros(now)}}, nil, false, now)

			at := now + 3*iv
			s.Tick(at)
			_, refuse, _ = s.Short(at, at, key, lim, 1, at+int64(time.Second), nil)
			assert.True(t, refuse, "refused alone three intervals on, before Until")
			asked := len(s.NextOps(at, 0)) > 0
			assert.Equal(t, tc.asks, asked, "an op three intervals on")

			after := share.Nanos(until) + iv
			s.Tick(after)
			_, refuse, _ = s.Short(after, after, key, lim, 1, after+int64(time.Second), nil)
			assert.False(t, refuse, "past Until, it asks")
		})
	}
}
