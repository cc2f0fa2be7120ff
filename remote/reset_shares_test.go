package remote

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// A reset forgives a contested key: the holders start afresh, so they have
// room to give again. Calls that came back empty before it (the key was
// exhausted) made the store stop calling for a while and answer "no room"
// at once; after the reset that back-off no longer holds. Before reset.lua
// cleared it, a node asking after the reset was told "no room" until the
// back-off ended, while the node holding the key had its whole burst again
// (TestResetAsync's resetting node was refused, on a busy machine).
func TestResetSharesEndsTheCallsBackOff(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	a, err := New(c, Options{Node: "a"})
	require.NoError(t, err)
	b, err := New(c, Options{Node: "b"})
	require.NoError(t, err)
	set := share.Settings{Lease: 10_000_000, CallWindow: 20_000, Cooldown: 5_000_000, Recovery: 1_000_000}
	lim := limit.PerHour(10)
	p, ok := share.ParamsOf(lim)
	require.True(t, ok)
	seq := int64(0)
	op := func(s *Store, o share.Op) share.Reply {
		t.Helper()
		seq++
		o.Key, o.Limit, o.Seq, o.Full, o.Shadow = "k", lim, seq, -1, -1
		var r [1]share.Reply
		require.NoError(t, s.ShareOps(bg, set, []share.Op{o}, r[:]))
		require.NoError(t, r[0].Err)
		return r[0]
	}
	now := time.Now().UnixMicro()
	spent := p.Spent(now)

	// a holds the whole key, spent; b asks, a keeps it all, b is told no
	// room, and the store stops calling.
	r := op(a, share.Op{Held: share.One, Keep: share.One, State: spent, Want: 1, Need: share.One, Fleet: 1})
	epoch := r.Epoch
	r = op(b, share.Op{Want: 1, Fleet: 2})
	require.Equal(t, share.Call, r.Outcome, "b's first ask calls a")
	op(a, share.Op{Epoch: epoch, Held: share.One, Keep: share.One, State: spent, Need: share.One, Fleet: 2})
	time.Sleep(30 * time.Millisecond) // the call window
	r = op(b, share.Op{Epoch: epoch, Want: 1, Fleet: 2})
	require.Equal(t, share.NoRoom, r.Outcome, "a answered, and the room did not come")
	r = op(b, share.Op{Epoch: epoch, Want: 1, Fleet: 2})
	require.Equal(t, share.NoRoom, r.Outcome, "the store has stopped calling for a while")

	_, _, err = b.ResetShares(bg, "k", lim)
	require.NoError(t, err)
	r = op(b, share.Op{Epoch: epoch, Want: 1, Fleet: 2})
	require.Equal(t, share.Call, r.Outcome, "after the reset a has room again: the store calls it")
}
