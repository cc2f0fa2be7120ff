package remote_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// A grant whose lease ended before the contest's last reset was a share
// nobody used at the reset, but reset.lua does not collect lapses: the next
// op does, and gave the lapsed grant and the split held back for it to the
// pool as wholly spent at their end. Into a pool that held nothing, that
// spent the whole key again: it stayed exhausted for its period, as if
// never reset. What lapsed (or was held back until) before the reset now
// returns fresh. Here a holds the whole key (a home), spent, and stops (a
// crash, a node scaled away without Flush); its home lease and its
// recovery end; then the key is reset, and b's first request has room.
func TestResetSharesTakesAGrantThatLapsedBeforeItAsFresh(t *testing.T) {
	st, set, _, lim, _, op, a := aHoldsTheKeySpent(t)

	// a sends nothing more: its home lease, and the recovery the store
	// holds its even split back for, both end; a second later, the reset.
	lapsed := a.LeaseEnd + set.Recovery
	reset := st.Reset(lapsed+1_000_000, "b", "k", lim)

	b := op(reset+1_000, "b", share.Op{Epoch: a.Epoch, Want: 1, ResetHeard: reset})
	t.Logf("a's lease ended at %d, its hold at %d, the reset at %d; b asks: %+v", a.LeaseEnd, lapsed, reset, b)
	assert.Equal(t, share.Done, b.Outcome, "the key was reset after a's grant lapsed: b's first request has room: %+v", b)
	assert.Positive(t, b.Growth, "%+v", b)
}

// A node that has not heard of the reset joins the contest reporting what
// it admitted alone before it (a pooled key it decided in an even split
// before the fleet grew): the pool the reset made fresh is not charged,
// and the resetting node's request is served. (Fails with either charge's
// guard removed from the script.)
func TestResetSharesChargesNothingOfASpendFromBeforeIt(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.PerHour(1) // one request: pooled over two nodes
	p, ok := share.ParamsOf(lim)
	require.True(t, ok)
	replies := make([]share.Reply, 1)
	serve := func(at int64) share.Reply {
		st.Ops(at, "b", set, []share.Op{{Key: "k", Limit: lim, Fleet: 2, Pooled: true, Seq: at, At: at, AskedAt: at,
			Want: 1, Serve: true, Each: 1, Full: -1, Shadow: -1, ResetHeard: at - 1}}, replies)
		return replies[0]
	}
	require.Equal(t, int64(1), serve(now).Served, "b's request makes the contest, served from its pool")
	require.Zero(t, serve(now+1_000).Served, "the pool is spent")
	reset := st.Reset(now+2_000, "b", "k", lim)
	at := now + 3_000
	st.Ops(at, "a", set, []share.Op{{Key: "k", Limit: lim, Fleet: 2, Pooled: true, Seq: at, At: at,
		Full: -1, Shadow: p.Spent(now).Level, ShadowSince: now - 1_000, ResetHeard: reset - 1}}, replies)
	require.Equal(t, 1, st.model.Branches.BeforeReset, "a had not heard of the reset")
	r := serve(now + 4_000)
	assert.Equal(t, int64(1), r.Served, "a's spend from before the reset charges the fresh pool nothing: %+v", r)
}

// A growth the node never received, of the pool from before the reset,
// returns fresh. Here the growth is of a pool with room for about one
// request of the whole key's: returned in that state, b's next ask (two
// requests) would be short and call a; returned fresh, as the reset made
// the pool, it is grown at once. (Fails with the script's branch removed:
// TestShareScriptsConformOnAReset's growth was of a fresh pool, where the
// branch changes nothing.)
func TestResetSharesTakesAGrowthNeverReceivedFromBeforeItAsFresh(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.PerHour(10)
	p, ok := share.ParamsOf(lim)
	require.True(t, ok)
	op := st.keyOps(set, "k", lim, 1)
	a := op(now, "a", share.Op{Held: share.One, Keep: share.One, State: p.Spent(now), Want: 1, Need: share.One})
	require.Equal(t, int64(share.One), a.Grant)
	now += 1_000
	low := p.Spent(now)
	low.Level -= 2 * p.Interval // room for two requests of the whole key's
	op(now, "a", share.Op{Epoch: a.Epoch, Held: share.One, Keep: share.One / 2, State: low})
	now += 1_000
	g := op(now, "b", share.Op{Epoch: a.Epoch, Want: 1})
	require.Equal(t, share.Done, g.Outcome, "%+v", g)
	require.Positive(t, g.Growth, "%+v", g)
	// b never gets that answer; the key is reset; b asks again.
	reset := st.Reset(now+1_000, "a", "k", lim)
	r := op(now+2_000, "b", share.Op{Epoch: a.Epoch, Want: 2, ResetHeard: reset})
	assert.Equal(t, share.Done, r.Outcome, "the growth b never got returns fresh, as the reset made the pool: %+v", r)
}

// An answer to a call from a node that has not heard of the reset says
// what its state from before it held: nothing to spare (it refused alone
// for want of room). Believed, the asker, which asked after the reset, was
// told no room at once, and the store's calls backed off, while the
// holder, once it heard of the reset, had its whole share fresh. Such an
// answer now settles no call: the asker waits for the fresh one (which
// the holder gives when it hears of the reset).
func TestResetSharesTakesNoRoomFromAnAnswerFromBeforeIt(t *testing.T) {
	st, _, now, lim, p, op, a := aHoldsTheKeySpent(t)
	reset := st.Reset(now+1_000, "b", "k", lim)

	call := op(now+2_000, "b", share.Op{Epoch: a.Epoch, Want: 1, ResetHeard: reset})
	require.Equal(t, share.Call, call.Outcome, "b asks after its reset: a holds the key, and is called: %+v", call)
	callAt := now + 2_000
	// a heard the call, not yet the reset: it answers with its spent state,
	// nothing to spare, having refused alone for want of room.
	op(now+3_000, "a", share.Op{Epoch: a.Epoch, Held: share.One, Keep: share.One, State: p.Spent(now + 3_000), Heard: callAt,
		ResetHeard: reset - 1})
	r := op(now+4_000, "b", share.Op{Epoch: a.Epoch, Want: 1, ResetHeard: reset})
	t.Logf("b asks again within the call's window: %+v (branches %+v)", r, st.model.Branches)
	assert.NotEqual(t, share.NoRoom, r.Outcome, "a's answer was of its state from before the reset: b waits for its fresh one: %+v", r)
}

// aHoldsTheKeySpent is a fleet of a and b (newFleetCase) where a holds the
// whole of key "k" (10 an hour), spent: the pool holds nothing. It returns
// the case, the key's limit and share parameters, op (keyOps on the key,
// a fleet of one: the contest waits for no join) and a's answer.
func aHoldsTheKeySpent(t *testing.T) (st *dualStore, set share.Settings, now int64, lim limit.Limit, p share.Params,
	op func(at int64, node string, o share.Op) share.Reply, a share.Reply) {
	t.Helper()
	st, set, now = newFleetCase(t, "a", "b")
	lim = limit.PerHour(10)
	p, ok := share.ParamsOf(lim)
	require.True(t, ok)
	op = st.keyOps(set, "k", lim, 1)
	a = op(now, "a", share.Op{Held: share.One, Keep: share.One, State: p.Spent(now), Want: 1, Need: share.One})
	require.Equal(t, int64(share.One), a.Grant, "a holds the whole key, spent")
	return st, set, now, lim, p, op, a
}

// A reset with no contest is kept all the same, an active window (rs,
// until rx). A node that has not heard of it yet and decided a pooled key
// alone in an even split before the fleet grew (carriesSpend) may make the
// contest with its shadow from before the reset: the pool is not charged
// with it, and the resetting node's first request, served from the pool,
// is admitted. Before, reset.lua kept nothing when there was no contest,
// and the pool started as spent as that shadow: refused for the period.
func TestResetSharesWithNoContestForgetsAShadowFromBeforeIt(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.PerHour(1) // one request: pooled over two nodes
	p, ok := share.ParamsOf(lim)
	require.True(t, ok)
	// No contest: b resets the key (reset.lua finds nothing to reset in
	// the contest's hash and writes no rs).
	reset := st.Reset(now, "b", "k", lim)
	// a, not having heard of it, reports what it admitted alone before:
	// its whole burst, a moment before the reset.
	replies := make([]share.Reply, 1)
	st.Ops(now+1_000, "a", set, []share.Op{{Key: "k", Limit: lim, Fleet: 2, Pooled: true, Seq: now + 1_000, At: now + 1_000,
		Full: -1, Shadow: p.Spent(now).Level, ShadowSince: now - 1_000, ResetHeard: reset - 1}}, replies)
	t.Logf("a reports its spend from before the reset: %+v (branches %+v)", replies[0], st.model.Branches)
	// b, which made the reset, asks: served from the pool.
	at := now + 2_000
	st.Ops(at, "b", set, []share.Op{{Key: "k", Limit: lim, Fleet: 2, Pooled: true, Seq: at, At: at, AskedAt: at,
		Want: 1, Serve: true, Each: 1, Full: -1, Shadow: -1, ResetHeard: reset}}, replies)
	t.Logf("b asks after its reset: %+v", replies[0])
	assert.Equal(t, int64(1), replies[0].Served, "the key was reset and nobody admitted since: b's request is served: %+v", replies[0])
}
