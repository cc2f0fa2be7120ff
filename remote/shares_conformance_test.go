package remote_test

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/sharesim"
	"github.com/hybridlimit/hybridlimit/internal/storemodel"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/share"
)

var conformCount = flag.Int("conform.count", 80, "how many simulated scenarios TestShareScriptsConform replays on Redis")

// TestShareScriptsConform holds the share scripts (shares.lua, registry.lua)
// to the Go model the simulation runs: it plays simulated scenarios with
// every op and heartbeat applied to both, on the same clock (the scripts read
// it from a key instead of TIME), and fails at the first answer that
// differs.
func TestShareScriptsConform(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ops, gone, goneOps, fast, resets := 0, 0, 0, 0, 0
	var br storemodel.Branches
	for seed := int64(1); seed <= int64(*conformCount); seed++ {
		require.NoError(t, c.FlushAll(context.Background()).Err())
		sc := sharesim.Generate(seed)
		st := &dualStore{t: t, seed: seed, c: c, model: storemodel.New(share.Duration(sc.ActiveWindow)),
			nodes: map[string]*remote.Store{}, active: sc.ActiveWindow}
		sharesim.RunOn(sc, st)
		n, err := c.Get(context.Background(), remote.FastKey(clockKey)).Int()
		if err != redis.Nil {
			require.NoError(t, err)
		}
		ops, gone, goneOps, fast, resets = ops+st.ops, gone+st.gone, goneOps+st.goneOps, fast+n, resets+st.resets
		br.Add(st.model.Branches)
		if testing.Verbose() {
			t.Logf("seed %d: %d ops and %d heartbeats agreed", seed, st.ops, st.beats)
		}
	}
	require.Positive(t, ops, "the scenarios sent no op")
	require.Positive(t, resets, "the scenarios reset no key (reset.lua against the model)")
	// Nodes that crash or leave: their departures read and sent with ops.
	require.Positive(t, goneOps, "no op was sent knowing of a departure (%d read)", gone)
	t.Logf("%d ops and %d resets agreed, %d ops sent knowing of a departure (%d read), %d answered by the fast path; the script's rarer branches taken: %+v",
		ops, resets, goneOps, gone, fast, br)
	// The fast path (a request the pool serves on a contest nobody holds
	// any of) is held to the model like the rest.
	assert.Positive(t, fast, "no op took the script's fast path")
	// The branches the share script's latest changes added, each met by
	// some op (the scenarios of the first 80 seeds meet them all).
	for name, n := range map[string]int{"backdated": br.Backdated, "served homes": br.ServedHomes, "refilled calls": br.RefilledCalls,
		"part served": br.PartServed, "heard calls": br.HeardCalls, "pool soon": br.PoolSoon, "before a reset": br.BeforeReset} {
		assert.Positive(t, n, "no op took the script's %s branch", name)
	}
}

// The departure's branch, which the simulated scenarios rarely reach: node
// a holds the whole of a pooled key (its home) and stops beating; node b,
// beating on, reads a's departure and asks with it. The script and the
// model must agree that a's grant lapsed as of when it left, held back in
// part, and what b is told, op for op.
func TestShareScriptsConformOnADeparture(t *testing.T) {
	st, set, now := newDirectCase(t)
	lim := limit.PerSecond(1)
	from := map[string]int64{}
	beat := func(node string) share.BeatReply {
		r := st.Beat(now, node, share.Beat{From: from[node], Limit: 1000, GoneKeep: 21_000_000})
		from[node] = r.Next
		return r
	}
	beat("a")
	beat("b")
	op := func(node string, o share.Op, set share.Settings) share.Reply {
		o.Key, o.Limit, o.Fleet, o.Pooled, o.Seq, o.At, o.Full, o.Shadow = "client", lim, 2, true, now, now, -1, -1
		replies := make([]share.Reply, 1)
		st.Ops(now, node, set, []share.Op{o}, replies)
		return replies[0]
	}
	home := op("a", share.Op{Want: 1, AskedAt: now, Need: share.One, Serve: true}, set)
	require.Equal(t, int64(share.One), home.Grant, "a's first request makes its home: %+v", home)
	// a beats no more; b does, every 100 ms, past a's active window.
	var gone []share.Departure
	for range 12 {
		now += 100_000
		gone = append(gone, beat("b").Gone...)
	}
	require.Len(t, gone, 1, "b reads a's departure")
	require.Equal(t, "a", gone[0].Node)
	set.Gone = gone
	now += 400_000 // past a's recovery: the even split held back for it returns too
	asked := op("b", share.Op{Want: 1, AskedAt: now, Need: share.One, Serve: true}, set)
	t.Logf("b asks after a left: %+v; the model's branches %+v", asked, st.model.Branches)
	assert.Equal(t, 1, st.model.Branches.GoneLapsed, "a's grant lapsed by its departure")
	// a's grant is the pool's, as wholly spent when a left (its even split
	// held back until a could have recovered): no holder is called, and the
	// room comes with the refill after that.
	assert.Contains(t, []share.Outcome{share.Done, share.NoRoom}, asked.Outcome, "b is not told to call or wait for a")
	assert.LessOrEqual(t, asked.Until, gone[0].At+set.Recovery+1_000_000, "room at the refill after a left and could have recovered")
}

// A pooled key's contest made by a node that decided the key alone before
// the fleet grew: the script and the model must agree that its pool starts
// at the creator's shadow, and what the creator is told (a branch the
// simulated scenarios above do not reach).
func TestShareScriptsConformOnAPooledContestsCreatorsShadow(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.Per(2, 10*time.Second).WithBurst(1)
	// a admitted one request alone 300 ms ago: its shadow is a whole
	// emission interval (5 s) less the 300 ms since.
	replies := make([]share.Reply, 1)
	st.Ops(now, "a", set, []share.Op{{Key: "client", Limit: lim, Fleet: 2, Pooled: true, Want: 1, AskedAt: now, Need: share.One,
		Serve: true, Each: 1, Seq: now, At: now, Full: -1, Shadow: 4_700_000_000, ShadowSince: now - 300_000}}, replies)
	t.Logf("a asks: %+v", replies[0])
	assert.Equal(t, 1, st.model.Branches.PooledShadow, "the pool started at a's shadow")
	assert.Zero(t, replies[0].Served, "a's second request within the refill time is not served")
}

// TestShareScriptsConformOnAReportOfSpendThatMakesAPooledContest: a node
// that decided a key alone reports its shadow when the fleet grows and the
// key is pooled, wanting nothing; the report makes the contest, as spent,
// and the new node's first request is not served from a full pool.
func TestShareScriptsConformOnAReportOfSpendThatMakesAPooledContest(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.Per(2, 10*time.Second).WithBurst(1)
	replies := make([]share.Reply, 1)
	st.Ops(now, "a", set, []share.Op{{Key: "client", Limit: lim, Fleet: 2, Pooled: true, Seq: now, At: now, Full: -1,
		Shadow: 4_700_000_000, ShadowSince: now - 300_000}}, replies)
	t.Logf("a reports: %+v", replies[0])
	assert.Equal(t, 1, st.model.Branches.ReportedSpend, "a's report made the contest")
	assert.Equal(t, share.Done, replies[0].Outcome)
	assert.Equal(t, int64(4_700_000_000), replies[0].Pool.Level, "the pool starts at a's shadow, counted once")
	assert.Zero(t, st.model.Branches.JoinedSpend, "the report that made the contest is not charged again")
	now += 20_000
	st.Ops(now, "b", set, []share.Op{{Key: "client", Limit: lim, Fleet: 2, Pooled: true, Want: 1, AskedAt: now, Need: share.One,
		Serve: true, Each: 1, Seq: now, At: now, Full: 0, ShadowSince: now}}, replies)
	t.Logf("b asks: %+v", replies[0])
	assert.Zero(t, replies[0].Served, "b's first request within a's refill time is not served")
	// A report of a bucket that is full makes nothing.
	st.Ops(now, "a", set, []share.Op{{Key: "other", Limit: lim, Fleet: 2, Pooled: true, Seq: now + 1, At: now, Full: now - 1,
		ShadowSince: now}}, replies)
	assert.Equal(t, share.Ended, replies[0].Outcome, "a report of nothing spent makes no contest")
	// Nor does a report of what a node owes after deciding degraded (it
	// holds its degraded share): as before, answered Ended.
	st.Ops(now, "a", set, []share.Op{{Key: "owed", Limit: lim, Fleet: 2, Pooled: true, Held: share.One / 2, Owed: true, Seq: now + 2,
		At: now, Full: -1, Shadow: 4_700_000_000, ShadowSince: now}}, replies)
	assert.Equal(t, share.Ended, replies[0].Outcome, "an owed report makes no contest")
}

// TestShareScriptsConformOnAJoinThatCarriesSpend: a fleet of two grows to
// three; a key of burst 2 is pooled now. a and b each spent their split
// alone and report it: a's report makes the contest, b's joins it and
// charges the pool with b's shadow; c's request is not served.
func TestShareScriptsConformOnAJoinThatCarriesSpend(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b", "c")
	lim := limit.Per(2, 10*time.Second) // burst 2, canonical
	replies := make([]share.Reply, 1)
	for i, node := range []string{"a", "b"} {
		st.Ops(now+int64(i), node, set, []share.Op{{Key: "client", Limit: lim, Fleet: 3, Pooled: true, Seq: now + int64(i), At: now - 10_000,
			Full: -1, Shadow: 4_900_000_000, ShadowSince: now - 100_000}}, replies)
		t.Logf("%s reports: %+v", node, replies[0])
		assert.Equal(t, share.Done, replies[0].Outcome)
	}
	assert.Equal(t, 1, st.model.Branches.ReportedSpend, "a's report made the contest")
	assert.Equal(t, 1, st.model.Branches.JoinedSpend, "b's report charged it")
	now += 20_000
	st.Ops(now, "c", set, []share.Op{{Key: "client", Limit: lim, Fleet: 3, Pooled: true, Want: 1, AskedAt: now, Need: share.One,
		Serve: true, Each: 1, Seq: now, At: now, Full: 0, ShadowSince: now}}, replies)
	t.Logf("c asks: %+v", replies[0])
	assert.Zero(t, replies[0].Served, "c's request within the refill time: a and b spent the burst")
}

// TestShareScriptsConformOnAReportFromAnOldRecord: a joined b's contest
// by a report of its spend (charged); later, back in its even split and
// having decided the key alone since, it reports again, its record in the
// contest holding nothing: charged again, as a join.
func TestShareScriptsConformOnAReportFromAnOldRecord(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.Per(2, 10*time.Second).WithBurst(1)
	replies := make([]share.Reply, 1)
	st.Ops(now, "b", set, []share.Op{{Key: "client", Limit: lim, Fleet: 2, Pooled: true, Want: 1, AskedAt: now, Need: share.One,
		Serve: true, Each: 1, Seq: now, At: now, Full: 0, ShadowSince: now}}, replies)
	t.Logf("b asks: %+v", replies[0])
	b := replies[0]
	// b gives its home back, so that the pool holds the key again.
	st.Ops(now+1_000, "b", set, []share.Op{{Key: "client", Limit: lim, Epoch: b.Epoch, Held: b.Grant, Fleet: 2, Pooled: true,
		Seq: now + 1_000, At: now + 1_000, Full: -1, ShadowSince: now, Applied: now}}, replies)
	t.Logf("b gives back: %+v", replies[0])
	for i, at := range []int64{now + 2_000, now + 6_000_000} {
		st.Ops(at, "a", set, []share.Op{{Key: "client", Limit: lim, Fleet: 2, Pooled: true, Seq: at, At: at,
			Full: -1, Shadow: 4_000_000_000, ShadowSince: at - 1_000}}, replies)
		t.Logf("a reports (%d): %+v", i, replies[0])
	}
	assert.Equal(t, 2, st.model.Branches.JoinedSpend, "a's first report joined, its second charged from its old record")
}

// TestShareScriptsConformOnAReset: reset.lua and the model's Reset make a
// contest's pool fresh; an op of a node that has not heard of the reset
// gives its share back fresh, as does an answer a node never got of the
// pool before the reset; a node that heard of it gives its state as it
// is. Each answer the script's and the model's alike, op for op.
func TestShareScriptsConformOnAReset(t *testing.T) {
	st, _, now, lim, p, op, a := aHoldsTheKeySpent(t)
	reset := st.Reset(now+1_000, "b", "k", lim)

	now += 2_000
	op(now, "a", share.Op{Epoch: a.Epoch, Held: share.One, Keep: share.One / 2, State: p.Spent(now), ResetHeard: reset - 1})
	assert.Equal(t, 1, st.model.Branches.BeforeReset, "a had not heard of the reset")
	b := op(now+1_000, "b", share.Op{Epoch: a.Epoch, Want: 1, ResetHeard: reset})
	assert.Equal(t, share.Done, b.Outcome, "what a gave back is fresh: %+v", b)
	require.Positive(t, b.Growth)

	// b never got that answer: its next op holds nothing, and the growth
	// returns as the pool was; reset again first, it returns fresh.
	reset = st.Reset(now+2_000, "a", "k", lim)
	after := op(now+3_000, "b", share.Op{Epoch: a.Epoch, Want: 1, ResetHeard: reset})
	assert.Equal(t, share.Done, after.Outcome, "%+v", after)
	assert.Equal(t, 2, st.model.Branches.BeforeReset, "b's growth was of the pool before the second reset")

	// a, having heard of both resets, gives the rest back spent: spent.
	op(now+4_000, "a", share.Op{Epoch: a.Epoch, Held: share.One / 2, State: p.Spent(now + 4_000), ResetHeard: reset})
	assert.Equal(t, 2, st.model.Branches.BeforeReset, "a's op before it heard, b's answer of the pool before the reset; not a's last")
	t.Logf("the model's branches: %+v", st.model.Branches)
}

// A call abandoned at its timeout may still reach Redis after the node
// resent its ops, had them answered and sent a key's next op. An earlier op
// of the node's than the last one answered is such a copy: answered Wait
// with nothing granted or served, not applied again (found in review: a
// node that took a grant and then left held it again when the grant's op
// came late, and the other node could have only half the limit). A node
// whose store's clock stepped back more than a second past its last op's
// seq numbers its ops below it: those are applied.
func TestShareScriptsConformOnALateCopyOfAnEarlierOp(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.PerSecond(10)
	op := st.keyOps(set, "k", lim, 2)
	first := share.Op{Held: share.One / 2, Keep: share.One / 2, Want: 1, AskedAt: now, Need: share.One, Seq: now, At: now}
	took := op(now, "a", first)
	require.Positive(t, took.Grant, "a takes a grant")
	left := op(now+1_000, "a", share.Op{Epoch: took.Epoch, Held: took.Grant, Leave: true, Seq: now + 1_000, Applied: now, At: now + 1_000})
	late := op(now+2_000, "a", first)
	t.Logf("a's first op again, after it left: %+v", late)
	assert.Zero(t, late.Grant, "an op earlier than the last one answered is not applied again: a holds nothing")
	assert.Equal(t, share.Wait, late.Outcome, "it is answered Wait, nothing granted or served")
	assert.Zero(t, late.Served)
	assert.Equal(t, share.Done, left.Outcome)

	// The store's clock steps back 2 s: a's new ops are numbered below its
	// last one, which is ahead of the clock now: applied.
	back := now - 2_000_000
	fresh := op(back, "a", share.Op{Epoch: took.Epoch, Held: 0, Want: 1, AskedAt: back, Need: share.One / 2, Seq: back, At: back, Join: true})
	t.Logf("a after the clock stepped back: %+v", fresh)
	assert.NotEqual(t, share.Ended, fresh.Outcome)
	assert.NotEqual(t, late, fresh, "applied, not answered as its last op was")
}

// A pooled key with no room for the requests a node waits on: the store
// says when the pool has room for the next one (not for all of them, which
// a burst of 1 never holds: it said a cooldown then, and the node refused
// the next request past its room), and that the instant is exact: nobody
// else holds any of the key. Where a node holds a share, it is not.
func TestShareScriptsConformOnNoRoomForTheNextRequest(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.Per(1, 100*time.Millisecond) // burst 1: one request a tenth of a second
	replies := make([]share.Reply, 1)
	serve := func(at int64, node string, want int64) share.Reply {
		st.Ops(at, node, set, []share.Op{{Key: "client", Limit: lim, Fleet: 2, Pooled: true, Want: want, AskedAt: at, Serve: true, Each: 1,
			Seq: at, At: at, Full: -1, Shadow: -1}}, replies)
		return replies[0]
	}
	first := serve(now, "a", 1)
	require.Equal(t, int64(1), first.Served, "the pool serves the first request")
	two := serve(now+10_000, "b", 2)
	t.Logf("two requests waiting, 10 ms on: %+v", two)
	assert.Equal(t, share.NoRoom, two.Outcome)
	assert.Equal(t, now+100_000, two.Until, "room for the next request a tenth of a second after the first")
	assert.True(t, two.Exact, "nobody holds any of the key: only the refill brings room")
}

// No room, nobody else holding any of the key, but shares held back that
// join the pool later (here: a contest the store lost, rebuilt from the one
// node that reported, the rest held back as unknown for a lease and a
// recovery time): the instant is not exact, since a larger pool may have
// the room sooner. (Suspected in a make test run beside a reviewer's tests:
// after a Redis kill, 28 requests within 20% of the limit refused, most by
// their node alone; not reproduced alone.)
func TestShareScriptsConformOnNoRoomWhileSharesAreHeldBack(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.PerSecond(10) // burst 10
	replies := make([]share.Reply, 1)
	spent := share.State{Level: 10 * int64(time.Second/10)} // its half wholly spent
	st.Ops(now, "a", set, []share.Op{{Key: "k", Limit: lim, Fleet: 2, Epoch: now - 5_000_000, Held: share.One / 2, Keep: share.One / 2,
		State: spent, At: now, Want: 1, AskedAt: now, Need: share.One, Seq: now, Full: -1, Shadow: -1}}, replies)
	got := replies[0]
	t.Logf("a reports its grant of a contest the store lost, and asks: %+v", got)
	require.True(t, got.Lost, "the contest is rebuilt")
	require.Equal(t, share.NoRoom, got.Outcome)
	assert.False(t, got.Exact, "what is held back as unknown joins the pool later: room may come sooner")
}

// newFleetCase is newDirectCase with nodes in the fleet, each having beat
// once.
func newFleetCase(t *testing.T, nodes ...string) (*dualStore, share.Settings, int64) {
	st, set, now := newDirectCase(t)
	for _, node := range nodes {
		st.Beat(now, node, share.Beat{Limit: 1000, GoneKeep: 21_000_000})
	}
	return st, set, now
}

// keyOps returns a function that sends one op on (key, lim) in a fleet of
// fleet from node at at (µs) and returns its answer: the op as given, its
// key, limit and fleet set, with no shadow and not full, numbered and
// stamped at unless it says otherwise.
func (d *dualStore) keyOps(set share.Settings, key string, lim limit.Limit, fleet int) func(at int64, node string, o share.Op) share.Reply {
	replies := make([]share.Reply, 1)
	return func(at int64, node string, o share.Op) share.Reply {
		o.Key, o.Limit, o.Fleet, o.Full, o.Shadow = key, lim, fleet, -1, -1
		if o.Seq == 0 {
			o.Seq = at
		}
		if o.At == 0 {
			o.At = at
		}
		d.Ops(at, node, set, []share.Op{o}, replies)
		return replies[0]
	}
}

// newDirectCase is a dualStore on a fresh redis-server for a case built op
// by op (an active window of 1 s), the settings its ops carry, and the
// clock (µs) it starts at.
func newDirectCase(t *testing.T) (*dualStore, share.Settings, int64) {
	const active = time.Second
	st := &dualStore{t: t, seed: 0, c: redistest.Start(t).Client(t), model: storemodel.New(share.Duration(active)),
		nodes: map[string]*remote.Store{}, active: active}
	set := share.Settings{Lease: 1_000_000, CallWindow: 40_000, Cooldown: 200_000, Recovery: 300_000, HomeLease: 20_000_000}
	return st, set, 1_800_000_000_000_000
}

// TestShareScriptsReadAnEarlierReleasesContests is the same with every
// contest written back, after each op, as a node of an earlier release
// writes it (its header without the sums that let an op read only its own
// record, its records without the call each node had heard): a rolling
// upgrade, where both releases share the hashes. Every answer must still be
// the model's (its records forgetting the calls heard too).
func TestShareScriptsReadAnEarlierReleasesContests(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ops := 0
	for seed := int64(1); seed <= 4; seed++ {
		require.NoError(t, c.FlushAll(context.Background()).Err())
		sc := sharesim.Generate(seed)
		st := &dualStore{t: t, seed: seed, c: c, model: storemodel.New(share.Duration(sc.ActiveWindow)),
			nodes: map[string]*remote.Store{}, active: sc.ActiveWindow, downgrade: true}
		sharesim.RunOn(sc, st)
		ops += st.ops
	}
	require.Positive(t, ops, "the scenarios sent no op")
	t.Logf("%d ops agreed on contests written as the previous release writes them", ops)
}

// dualStore applies every call to the model and to Redis and compares.
type dualStore struct {
	t          *testing.T
	seed       int64
	c          *redis.Client
	model      *storemodel.Model
	nodes      map[string]*remote.Store
	active     time.Duration
	ops, beats int
	resets     int // resets played on both
	// gone counts the departures heartbeats read, goneOps the ops sent
	// while their node knew of one.
	gone, goneOps int
	// downgrade writes each contest's header back as an earlier release
	// wrote it (17 values, no sums) after every op, and its records (15
	// values, no call heard).
	downgrade bool
}

// oldHeader and oldRecord are the sizes of an earlier release's contest
// header and node record.
const oldHeader, oldRecord = 17 * 8, 15 * 8

const clockKey = "conform:now"

func (d *dualStore) node(id string) *remote.Store {
	s := d.nodes[id]
	if s == nil {
		var err error
		s, err = remote.New(d.c, remote.Options{Node: id, ActiveWindow: d.active})
		require.NoError(d.t, err)
		s.UseClockKey(clockKey)
		d.nodes[id] = s
	}
	return s
}

func (d *dualStore) setClock(now int64) {
	require.NoError(d.t, d.c.Set(context.Background(), clockKey, strconv.FormatInt(now, 10), 0).Err())
}

func (d *dualStore) Ops(now int64, node string, set share.Settings, ops []share.Op, replies []share.Reply) {
	sharesim.ModelStore{Model: d.model}.Ops(now, node, set, ops, replies)
	d.setClock(now)
	got := make([]share.Reply, len(ops))
	err := d.node(node).ShareOps(context.Background(), set, ops, got)
	require.NoError(d.t, err, "seed %d", d.seed)
	for i := range ops {
		want := replies[i]
		if got[i] != want {
			d.t.Fatalf("seed %d, at %d µs, node %s, op %d of %d: %+v\nmodel: %+v\nredis: %+v",
				d.seed, now, node, i+1, len(ops), ops[i], want, got[i])
		}
	}
	d.ops += len(ops)
	if len(set.Gone) > 0 {
		d.goneOps += len(ops)
	}
	if d.downgrade {
		for _, op := range ops {
			k := d.node(node).ShareKey(op.Key, op.Limit)
			m, err := d.c.HGet(context.Background(), k, "m").Result()
			if err == nil && len(m) > oldHeader {
				require.NoError(d.t, d.c.HSet(context.Background(), k, "m", m[:oldHeader]).Err())
			}
			fields, err := d.c.HGetAll(context.Background(), k).Result()
			require.NoError(d.t, err)
			for f, v := range fields {
				if strings.HasPrefix(f, "r:") && len(v) > oldRecord {
					require.NoError(d.t, d.c.HSet(context.Background(), k, f, v[:oldRecord]).Err())
				}
			}
			if h := d.model.Hash(now, op.Key, op.Limit); h != nil {
				for _, rec := range h.Records {
					rec.Heard = 0
				}
			}
		}
	}
}

// Reset resets (key, lim)'s contest at now from node, on both, and returns
// the reset's µs.
func (d *dualStore) Reset(now int64, node, key string, lim limit.Limit) int64 {
	d.ResetShares(now, node, key, lim)
	return now
}

// ResetShares is reset.lua and the model's Reset at now, from node: the
// simulated scenarios' resets (sharesim.Resetter) play on both, and must
// agree on whether there was a contest to reset.
func (d *dualStore) ResetShares(now int64, node, key string, lim limit.Limit) bool {
	want := d.model.Reset(now, key, lim)
	d.setClock(now)
	had, at, err := d.node(node).ResetShares(context.Background(), key, lim)
	require.NoError(d.t, err)
	require.Equal(d.t, want, had, "seed %d, at %d µs: a contest to reset", d.seed, now)
	require.Equal(d.t, now, share.Micros(at))
	d.resets++
	return want
}

func (d *dualStore) Beat(now int64, node string, b share.Beat) share.BeatReply {
	want := d.model.Beat(now, node, b)
	d.setClock(now)
	var got share.BeatReply
	require.NoError(d.t, d.node(node).ShareBeat(context.Background(), &b, &got), "seed %d", d.seed)
	if m, r := beatString(want), beatString(got); m != r {
		d.t.Fatalf("seed %d, at %d µs, node %s, beat %+v\nmodel: %s\nredis: %s", d.seed, now, node, b, m, r)
	}
	d.beats++
	d.gone += len(want.Gone)
	return want
}

// beatString prints a heartbeat's reply with its limits in one form.
func beatString(r share.BeatReply) string {
	s := fmt.Sprintf("now=%d nodes=%d new=%v next=%d more=%v", r.Now, r.Nodes, r.New, r.Next, r.More)
	for _, c := range r.Changes {
		s += fmt.Sprintf(" [%s %s %d %d %d %d]", c.Key, c.Limit.Canonical(), c.Epoch, c.CallAt, c.Expiry, c.Reset)
	}
	for _, g := range r.Gone {
		s += fmt.Sprintf(" [gone %s %d]", g.Node, g.At)
	}
	return s
}

func (d *dualStore) Restart() {
	d.model.Restart()
	require.NoError(d.t, d.c.FlushAll(context.Background()).Err())
}

func (d *dualStore) Delete(key string, lim limit.Limit) {
	d.model.Delete(key, lim)
	require.NoError(d.t, d.c.Del(context.Background(), d.node("evictor").ShareKey(key, lim)).Err())
}

// The fast path (a request the pool serves on a token bucket's contest that
// nobody holds any of) answers the ops of a call it can before the general
// path takes the rest. Each call here is held to the model, which applies
// its ops one by one in order: a call of fast ops only, one that mixes them
// with ops the general path takes, and one that names a key twice (which a
// node never sends): the order must not show.
func TestShareScriptsConformOnCallsTheFastPathAnswersInPart(t *testing.T) {
	lim := limit.Per(1, 100*time.Millisecond) // burst 1: pooled over two nodes
	serve := func(key string, epoch, at int64) share.Op {
		return share.Op{Key: key, Limit: lim, Fleet: 2, Pooled: true, Epoch: epoch, Want: 1, AskedAt: at, Serve: true, Each: 1,
			At: at, Full: -1, Shadow: -1}
	}
	cases := []struct {
		name   string
		keys   []string // the call's ops, one serve op each (but grow*), in order
		unseen bool     // a names no contest (epoch 0): it has not joined them
		shadow int64    // what a says it admitted alone (-1: none)
		fast   int64    // the ops the fast path must have answered
	}{
		{"every op fast", []string{"k1", "k2", "k3"}, false, -1, 3},
		{"new keys: their contests made fast", []string{"new1", "k1", "new2"}, false, -1, 3},
		{"fast and general mixed", []string{"k1", "grow1", "k2", "grow2", "k3"}, false, -1, 3},
		{"a key twice", []string{"k1", "k2", "k1"}, false, -1, 0},
		{"contests the node has not joined", []string{"k1", "k2", "k3"}, true, -1, 3},
		{"not joined, carrying what it admitted alone", []string{"k1", "k2", "k3"}, true, 5_000_000, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, set, now := newFleetCase(t, "a", "b")
			// Each of k1..k3 served once on b: a contest nobody holds any of
			// (no home: b's op needs nothing), its epoch known to a.
			epochs := map[string]int64{}
			replies := make([]share.Reply, 1)
			for i, k := range []string{"k1", "k2", "k3"} {
				at := now + int64(i)
				st.Ops(at, "b", set, []share.Op{serve(k, 0, at)}, replies)
				require.Equal(t, int64(1), replies[0].Served)
				epochs[k] = replies[0].Epoch
			}
			at := now + 150_000 // the pools have refilled
			ops := make([]share.Op, len(tc.keys))
			for i, k := range tc.keys {
				ops[i] = serve(k, epochs[k], at) // a new key: epoch 0, the general path
				if tc.unseen {
					ops[i].Epoch = 0
				}
				if strings.HasPrefix(k, "grow") {
					ops[i].Serve = false // a share asked for: the general path
				}
				ops[i].Seq, ops[i].Shadow = at+int64(i), tc.shadow
			}
			before := st.fastOps()
			replies = make([]share.Reply, len(ops))
			st.Ops(at, "a", set, ops, replies) // held to the model, op by op
			assert.Equal(t, tc.fast, st.fastOps()-before, "ops the fast path answered")
			for i, r := range replies {
				t.Logf("%s: %+v", tc.keys[i], r)
			}
		})
	}
}

// fastOps is how many ops shares.lua's fast path has answered on d's store.
func (d *dualStore) fastOps() int64 {
	n, err := d.c.Get(context.Background(), remote.FastKey(clockKey)).Int64()
	if err == redis.Nil {
		return 0
	}
	require.NoError(d.t, err)
	return n
}

// A call no node holding a grant can answer with room: once every such
// node has answered it (its op made after it heard the call, or it asked
// for room itself after the call and was not given it), the asker is told
// no room at once, not Wait until the call's window ends. A key over its
// limit on every node kept each request its node's share could not admit
// waiting out the window (40 ms), to be refused then: a tenth of the hot
// key's decisions in make bench-keys, its p99 44 ms against Sync's 4 ms.
// An op made before the node heard the call answers nothing: it may have
// room to spare that its answer will give.
func TestShareScriptsConformOnACallEveryHolderAnswered(t *testing.T) {
	lim := limit.PerSecond(100) // burst 100: an even split of 50 each
	spent := share.State{Level: int64(time.Second)}
	for _, tc := range []struct {
		name string
		b    func(op func(int64, string, share.Op) share.Reply, at, epoch, callAt int64) // b's op after the call, if any
		want share.Outcome
	}{
		{"b has not answered", nil, share.Wait},
		{"b's op was made before it heard the call", func(op func(int64, string, share.Op) share.Reply, at, epoch, _ int64) {
			op(at, "b", share.Op{Epoch: epoch, Held: share.One / 2, Keep: share.One / 2, State: spent, Need: share.One / 2})
		}, share.Wait},
		{"b answered, sparing nothing", func(op func(int64, string, share.Op) share.Reply, at, epoch, callAt int64) {
			op(at, "b", share.Op{Epoch: epoch, Held: share.One / 2, Keep: share.One / 2, State: spent, Heard: callAt})
		}, share.NoRoom},
		{"b asked for room after the call", func(op func(int64, string, share.Op) share.Reply, at, epoch, _ int64) {
			r := op(at, "b", share.Op{Epoch: epoch, Held: share.One / 2, Keep: share.One / 2, State: spent, Want: 1, AskedAt: at, Need: share.One})
			require.Equal(t, share.NoRoom, r.Outcome, "b: a asked after the call too, and spares nothing")
		}, share.NoRoom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, set, now := newFleetCase(t, "a", "b")
			op := st.keyOps(set, "hot", lim, 2)
			ask := func(at int64) share.Reply {
				return op(at, "a", share.Op{Held: share.One / 2, Keep: share.One / 2, State: spent, Want: 1, AskedAt: at, Need: share.One})
			}
			made := ask(now)
			require.Equal(t, share.Call, made.Outcome, "a's ask makes the contest and calls b to join: %+v", made)
			join := op(now+1_000, "b", share.Op{Held: share.One / 2, Keep: share.One / 2, State: spent, Join: true})
			require.Equal(t, share.Done, join.Outcome)
			// Past the contest's first call: a asks again, its split spent,
			// and calls b.
			at := now + 4*set.CallWindow
			ask2 := func(at int64) share.Reply {
				return op(at, "a", share.Op{Epoch: made.Epoch, Held: share.One / 2, Keep: share.One / 2, State: spent, Want: 1, AskedAt: at,
					Need: share.One, Applied: now})
			}
			called := ask2(at)
			require.Equal(t, share.Call, called.Outcome, "%+v", called)
			if tc.b != nil {
				tc.b(op, at+1_000, made.Epoch, called.Now)
			}
			again := ask2(at + 5_000) // within the call's window
			t.Logf("a asks again 5 ms after its call: %+v", again)
			assert.Equal(t, tc.want, again.Outcome)
		})
	}
}

// An op that names a contest which expired as the op came (sent before its
// expiry, run just after) finds no contest. Taken for one the store lost,
// its pool started wholly spent and the request was refused (the
// simulation's seed 3914: a per-client key refused 2.6 s after anything
// was spent). A contest expires only after every grant has lapsed and its
// pool refilled: the new one starts as any new one does.
func TestShareScriptsConformOnAnOpThatCrossesTheContestsExpiry(t *testing.T) {
	st, set, now := newFleetCase(t, "a", "b")
	lim := limit.PerSecond(10)
	op := st.keyOps(set, "k", lim, 1)
	first := op(now, "a", share.Op{Want: 1, AskedAt: now, Need: share.One})
	require.Equal(t, share.Done, first.Outcome, "%+v", first)
	given := op(now+1_000, "a", share.Op{Epoch: first.Epoch, Held: first.Grant, State: first.Pool, At: now + 1_000})
	require.Zero(t, given.Grant, "a gives the key back: %+v", given)
	late := op(given.Expiry+1, "b", share.Op{Epoch: first.Epoch, Want: 1, AskedAt: given.Expiry - 100})
	t.Logf("b's op, sent before the contest's expiry, run just after: %+v", late)
	assert.False(t, late.Lost, "an expired contest is not a lost one: %+v", late)
	assert.Equal(t, share.Done, late.Outcome, "its pool refilled long ago: %+v", late)
}
