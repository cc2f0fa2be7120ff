package remote

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
	a, b, lim, op := newResetCase(t)
	p, _ := share.ParamsOf(lim)
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

	_, _, err := b.ResetShares(bg, "k", lim)
	require.NoError(t, err)
	r = op(b, share.Op{Epoch: epoch, Want: 1, Fleet: 2})
	require.Equal(t, share.Call, r.Outcome, "after the reset a has room again: the store calls it")
}

// A node hears of a reset through the registry, a beat or so after it: its
// ops meanwhile carry its state from before, spent. A give of such a state
// into the pool the reset made fresh spent the pool again, and the key
// stayed exhausted for its period (TestResetAsync: the resetting node's
// first request refused from Redis, and no node admitted for 10 s of a
// limit of 20 an hour). The store takes the state of a node that has not
// heard of the contest's last reset as fresh; a node that has heard of it
// gives its state as it is (spent after the reset is spent).
func TestResetSharesTakesAStateFromBeforeItAsFresh(t *testing.T) {
	for _, c := range []struct {
		name  string
		heard func(reset int64) int64 // the op's ResetHeard, given the reset's µs
		room  bool                    // b's request finds room
	}{
		{"a give from a node that has not heard of the reset", func(int64) int64 { return 0 }, true},
		{"a give from a node that heard of an earlier reset", func(r int64) int64 { return r - 1 }, true},
		{"a give from a node that heard of it, spent since", func(r int64) int64 { return r }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, lim, op := newResetCase(t)
			p, _ := share.ParamsOf(lim)
			now := time.Now().UnixMicro()
			// a holds the whole key, spent: the pool holds nothing.
			r := op(a, share.Op{Held: share.One, Keep: share.One, State: p.Spent(now), At: now, Want: 1, Need: share.One, Fleet: 1})
			epoch := r.Epoch
			require.Equal(t, int64(share.One), r.Grant)

			_, at, err := b.ResetShares(bg, "k", lim)
			require.NoError(t, err)
			reset := share.Micros(at)
			// a gives half back in its state, spent, as of after the reset.
			now = time.Now().UnixMicro()
			op(a, share.Op{Epoch: epoch, Held: share.One, Keep: share.One / 2, State: p.Spent(now), At: now, Fleet: 2,
				ResetHeard: c.heard(reset)})
			r = op(b, share.Op{Epoch: epoch, Want: 1, Fleet: 2, ResetHeard: reset})
			if c.room {
				assert.Equal(t, share.Done, r.Outcome, "the pool the reset made fresh has room: %+v", r)
				assert.Positive(t, r.Growth)
			} else {
				assert.NotEqual(t, share.Done, r.Outcome, "what a spent after the reset is spent: %+v", r)
			}
		})
	}
}

// newResetCase is two stores, a and b, on a fresh redis-server, a key's
// limit (10 an hour) and op, which sends one op of a store on the key
// (numbered, neither full nor with a shadow) and returns its answer.
func newResetCase(t *testing.T) (a, b *Store, lim limit.Limit, op func(s *Store, o share.Op) share.Reply) {
	c := redistest.Start(t).Client(t)
	a, err := New(c, Options{Node: "a"})
	require.NoError(t, err)
	b, err = New(c, Options{Node: "b"})
	require.NoError(t, err)
	set := share.Settings{Lease: 10_000_000, CallWindow: 20_000, Cooldown: 5_000_000, Recovery: 1_000_000}
	lim = limit.PerHour(10)
	seq := int64(0)
	op = func(s *Store, o share.Op) share.Reply {
		t.Helper()
		seq++
		o.Key, o.Limit, o.Seq, o.Full, o.Shadow = "k", lim, seq, -1, -1
		var r [1]share.Reply
		require.NoError(t, s.ShareOps(bg, set, []share.Op{o}, r[:]))
		require.NoError(t, r[0].Err)
		return r[0]
	}
	return a, b, lim, op
}
