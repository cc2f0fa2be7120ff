package remote_test

// When a NoRoom's instant is exact, and what a late or misnumbered op is
// answered: cases on both the script and the model (dualStore fails at the
// first answer that differs), each found in review and failing before its
// fix.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// The grow path (a node holding a share asks for more): the pool has no
// room now, so it grows by nothing, and Until is computed on the node's own
// share alone; Exact is set (nobody else holds any). But the pool's share
// refills too, and the node may grow from it as soon as it has room: an
// exact limiter has room for the next request far sooner. (The home path,
// which would recompute on the whole limit, does not run: another node
// asked within a lease.)
func TestNoRoomOnTheGrowPathIsNotExact(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.PerSecond(10) // burst 10, 10/s
	p, _ := share.ParamsOf(lim)
	op := st.keyOps(set, "k", lim, 2)
	half := share.Even(2)
	fresh := p.Decay(share.State{}, 0, now)
	// a makes the contest in its even split; b's is reserved.
	a := op(now, "a", share.Op{Held: half, Keep: half, State: fresh, Want: 1, AskedAt: now, Need: half})
	require.Equal(t, share.Done, a.Outcome, "%+v", a)
	// b joins, having spent all its split alone, and gives it back: the
	// pool holds half the limit, spent.
	t1 := now + 1_000
	b := op(t1, "b", share.Op{Held: half, Keep: 0, State: p.Spent(t1), Join: true})
	require.Equal(t, share.Done, b.Outcome, "%+v", b)
	// b asks to be served from the pool: a holds a share, so it is called.
	t2 := t1 + 1_000
	b = op(t2, "b", share.Op{Epoch: a.Epoch, Want: 1, AskedAt: t2, Serve: true, Each: 1, Applied: t1})
	t.Logf("b asks: %+v", b)
	// a spent its split too and asks for one more.
	t3 := t2 + 1_000
	r := op(t3, "a", share.Op{Epoch: a.Epoch, Held: half, Keep: half, State: p.Spent(t3), Want: 1, AskedAt: t3, Need: half, Applied: now})
	t.Logf("a asks: %+v", r)
	require.Equal(t, share.NoRoom, r.Outcome)
	h := st.model.Hash(t3, "k", lim)
	pool := p.Decay(h.PoolState, h.PoolAt, t3)
	whole := p.When(half+h.Pool, 1, p.Merge(half, p.Spent(t3), h.Pool, pool), t3)
	t.Logf("pool %d; room for 1 in a's share alone at +%v, in a's share and the pool at +%v",
		h.Pool, time.Duration(r.Until-t3)*time.Microsecond, time.Duration(whole-t3)*time.Microsecond)
	if r.Exact {
		assert.LessOrEqual(t, r.Until, whole, "Exact: a refuses alone until Until, though the limit has room for the next request at %d", whole)
	}
	// Asked again (as it does when not exact, within two intervals of each
	// answer) 120 ms on, before Until, the store grows it: room.
	t4 := t3 + 120_000
	again := op(t4, "a", share.Op{Epoch: a.Epoch, Held: half, Keep: half, State: p.Decay(p.Spent(t3), t3, t4), Want: 1, AskedAt: t4, Need: half, Applied: t3})
	t.Logf("a asks again at +120ms: %v growth %d", again.Outcome, again.Growth)
	assert.False(t, r.Exact && again.Outcome == share.Done && t4 < r.Until, "told no room until +%v exactly; the store had room at +120ms",
		time.Duration(r.Until-t3)*time.Microsecond)
}

// The serve path with requests of different weights (Each 0): Until is for
// all of them, and Exact is set; the node refuses every request alone until
// then, the oldest (which the pool has room for now) included.
func TestNoRoomForRequestsOfDifferentWeightsIsNotExact(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.PerSecond(10)
	replies := make([]share.Reply, 1)
	serve := func(at int64, node string, want, each int64) share.Reply {
		st.Ops(at, node, set, []share.Op{{Key: "k", Limit: lim, Fleet: 2, Pooled: true, Want: want, AskedAt: at, Serve: true, Each: each,
			Seq: at, At: at, Full: -1, Shadow: -1}}, replies)
		return replies[0]
	}
	first := serve(now, "a", 9, 1) // 9 of the 10 served
	require.Equal(t, int64(9), first.Served, "%+v", first)
	// b waits on two requests, of 1 and 5: the pool has room for the
	// first (one left) but not both.
	t1 := now + 1_000
	r := serve(t1, "b", 6, 0)
	t.Logf("b, waiting on 1 then 5: %+v (Until +%v)", r, time.Duration(r.Until-t1)*time.Microsecond)
	if r.Outcome == share.NoRoom {
		assert.False(t, r.Exact && r.Until > t1, "Exact with Until +%v: b refuses alone until then, though the pool has room now for its oldest request",
			time.Duration(r.Until-t1)*time.Microsecond)
	}
	// Its oldest alone, asked at once, is served.
	one := serve(t1+1, "b", 1, 1)
	t.Logf("b's oldest alone, asked at once: %v served %d", one.Outcome, one.Served)
}

// An op numbered below the node's record is answered as the
// record's op was, whoever sent it. A process that took over the node's
// name (a restart with Node configured, a pod name reused) after Redis's
// clock stepped back by less than StaleSeqAhead (a failover to a replica
// behind) numbers its ops on the new clock, below the old process's: its
// first ask is answered with the old process's Served, and the node admits
// its waiter on it. Nothing was charged for it.
func TestANewProcessNumberedBelowTheOldOneIsNotAnsweredWithItsServed(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.Per(1, time.Second) // burst 1
	replies := make([]share.Reply, 1)
	serve := func(storeNow, seq int64, node string) share.Reply {
		st.Ops(storeNow, node, set, []share.Op{{Key: "client", Limit: lim, Fleet: 2, Pooled: true, Want: 1, AskedAt: seq, Serve: true, Each: 1,
			Seq: seq, At: seq, Full: -1, Shadow: -1}}, replies)
		return replies[0]
	}
	first := serve(now, now, "a")
	require.Equal(t, int64(1), first.Served, "%+v", first)
	// 300 ms on, Redis's clock steps back 500 ms (its TIME reads now-200ms);
	// a new process named "a" maps its clock to it and asks.
	back := now - 200_000
	second := serve(back, back, "a")
	t.Logf("the new process asks: %+v", second)
	assert.Zero(t, second.Served, "a second request within the refill (1 s) served: the old process's answer, replayed")
	// b asks too: the pool is (rightly) spent, so the fleet admitted 2
	// where the limit allows 1 within a second.
	third := serve(back+1_000, back+1_000, "b")
	t.Logf("b asks: %+v", third)
}

// Exact is set on the serve path when no other node holds a grant or a
// hold, but a rebuilt contest's Unknown (what the nodes the store lost
// track of held) returns to the pool at UnknownUntil, which may come before
// Until: the node refuses alone until Until while the store would serve it
// sooner. (alone(), which the home path uses, counts Unknown; holders(),
// which Exact uses, does not.)
func TestNoRoomWithUnknownHeldBackIsNotExact(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.Per(10, 10*time.Second) // burst 10, one a second
	p, _ := share.ParamsOf(lim)
	op := st.keyOps(set, "k", lim, 2)
	half := share.Even(2)
	// a holds half of a contest the store lost (epoch 1): rebuilt, the rest
	// unknown for a lease and the recovery time; it gives its half back,
	// spent.
	r := op(now, "a", share.Op{Epoch: now - 5_000_000, Held: half, Keep: 0, State: p.Spent(now)})
	require.True(t, r.Lost, "%+v", r)
	h := st.model.Hash(now, "k", lim)
	t.Logf("rebuilt: pool %d, unknown %d until +%v", h.Pool, h.Unknown, time.Duration(h.UnknownUntil-now)*time.Microsecond)
	t1 := now + 1_000
	r = op(t1, "a", share.Op{Epoch: r.Epoch, Want: 1, AskedAt: t1, Serve: true, Each: 1, Applied: now})
	t.Logf("a asks: %v Until +%v Exact %v", r.Outcome, time.Duration(r.Until-t1)*time.Microsecond, r.Exact)
	require.Equal(t, share.NoRoom, r.Outcome)
	// Asked before Until, after the unknown returned, the store serves it.
	t2 := h.UnknownUntil + 400_000
	require.Less(t, t2, r.Until)
	r2 := op(t2, "a", share.Op{Epoch: r.Epoch, Want: 1, AskedAt: t2, Serve: true, Each: 1, Applied: t1})
	t.Logf("a asks again at +%v: %v served %d", time.Duration(t2-t1)*time.Microsecond, r2.Outcome, r2.Served)
	if r.Exact && r2.Served > 0 {
		t.Errorf("told no room until +%v, exactly, but served at +%v", time.Duration(r.Until-t1)*time.Microsecond, time.Duration(t2-t1)*time.Microsecond)
	}
}
