package remote

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// shareFleet is a fleet of stores on one Redis, each a node.
func shareFleet(t *testing.T, n int, opts Options) []*Store {
	srv := redistest.Start(t)
	c := srv.Client(t)
	nodes := make([]*Store, n)
	for i := range nodes {
		o := opts
		o.Node = fmt.Sprintf("n%d", i)
		var err error
		nodes[i], err = New(c, o)
		require.NoError(t, err)
	}
	return nodes
}

func oldShare(t *testing.T, s *Store, fleet int, acked int64, r ShareReport) ShareAnswer {
	t.Helper()
	round := ShareRound{Fleet: fleet, Acked: acked}
	if r.Now == 0 {
		r.Now = time.Now().UnixNano()
	}
	require.NoError(t, s.Contest(bg, []ShareReport{r}, &round))
	require.NoError(t, round.Answers[0].Err)
	return round.Answers[0]
}

const even4 = GrantOne / 4

// TestAClaimGrowsOnceTheFleetHasAcked: a node that claims a key holds an
// even split until every node has processed the claim; then the others'
// splits (they did not hold the key) join the pool, unspent, and the node
// grows to its target.
func TestAClaimGrowsOnceTheFleetHasAcked(t *testing.T) {
	nodes := shareFleet(t, 1, Options{})
	lim := limit.Per(100, time.Hour)
	a := oldShare(t, nodes[0], 4, 0, ShareReport{Key: "k", Limit: lim, Grant: even4, Demand: 50, Claim: true})
	assert.Equal(t, int64(even4), a.Grant, "not acked: the others still hold their splits")
	assert.Zero(t, a.Growth)
	assert.Equal(t, int64(GrantOne), a.Target, "alone on the key: it wants all of it")
	assert.True(t, a.Recall, "its want waits on the others")

	acked := a.Now + 1
	b := oldShare(t, nodes[0], 4, acked, ShareReport{Key: "k", Limit: lim, Grant: a.Grant, Demand: 50, Applied: a.Seq})
	assert.Equal(t, int64(GrantOne), b.Grant)
	assert.Equal(t, int64(3*even4), b.Growth)
	assert.LessOrEqual(t, b.Pool.TAT, b.Now, "the splits nobody used come unspent")
	assert.Less(t, b.LeaseEnd-b.Now, int64(time.Second), "above an even split: the short lease")
}

// TestGrowthCarriesThePoolsState: capacity a node gives up carries its spent
// state into the pool, and a node that takes it takes that state: moving
// capacity never creates room.
func TestGrowthCarriesThePoolsState(t *testing.T) {
	nodes := shareFleet(t, 2, Options{})
	lim := limit.Per(100, time.Hour) // tolerance 100 intervals
	T := int64(lim.Interval())
	now := func() int64 { return time.Now().UnixNano() }
	x := oldShare(t, nodes[0], 2, 0, ShareReport{Key: "k", Limit: lim, Grant: GrantOne / 2, Demand: 10, Claim: true})
	y := oldShare(t, nodes[1], 2, 0, ShareReport{Key: "k", Limit: lim, Grant: GrantOne / 2, Demand: 10})
	require.Equal(t, int64(GrantOne/2), x.Grant)
	require.Equal(t, int64(GrantOne/2), y.Grant)
	// Node 0 spent all of its half: its estimate's level is the whole
	// tolerance. It has little demand now and gives most of its half back.
	t0 := now()
	oldShare(t, nodes[0], 2, t0, ShareReport{Key: "k", Limit: lim, Grant: GrantOne / 8, Demand: 1,
		State: limit.State{TAT: t0 + 100*T}, Now: t0, Applied: x.Seq})
	// Node 1 wants more: it takes the pool, and the pool's state is spent.
	b := oldShare(t, nodes[1], 2, t0, ShareReport{Key: "k", Limit: lim, Grant: y.Grant, Demand: 100, Applied: y.Seq})
	assert.Positive(t, b.Growth)
	assert.InDelta(t, float64(100*T), float64(b.Pool.TAT-b.Now), float64(time.Second), "what it takes is as spent as what was given up")
	assert.LessOrEqual(t, b.Grant+GrantOne/8, int64(GrantOne), "grants stay within the limit")
}

// TestALapsedLeaseReturnsToThePoolAsSpent: a node that took more than an
// even split and stopped renewing it keeps an even split at most; the rest
// returns to the pool as if wholly spent when the lease lapsed.
func TestALapsedLeaseReturnsToThePoolAsSpent(t *testing.T) {
	nodes := shareFleet(t, 2, Options{Lease: time.Second, ShortLease: 100 * time.Millisecond})
	lim := limit.Per(100, time.Hour)
	T := int64(lim.Interval())
	a := oldShare(t, nodes[0], 2, 0, ShareReport{Key: "k", Limit: lim, Grant: GrantOne / 2, Demand: 100, Claim: true})
	a = oldShare(t, nodes[0], 2, a.Now+1, ShareReport{Key: "k", Limit: lim, Grant: a.Grant, Demand: 100, Applied: a.Seq})
	require.Equal(t, int64(GrantOne), a.Grant, "alone, after the fleet acked")
	time.Sleep(150 * time.Millisecond)
	b := oldShare(t, nodes[1], 2, a.Now+1, ShareReport{Key: "k", Limit: lim, Grant: 0, Demand: 100})
	assert.Equal(t, int64(GrantOne/2), b.Grant, "the lapsed half, no more")
	assert.InDelta(t, float64(100*T-150*int64(time.Millisecond)), float64(b.Pool.TAT-b.Now), float64(100*time.Millisecond),
		"taken as wholly spent at the lapse, drained since")
}

// TestUnappliedGrowthIsTakenBack: an answer that never reached the node
// leaves no share behind.
func TestUnappliedGrowthIsTakenBack(t *testing.T) {
	nodes := shareFleet(t, 1, Options{})
	lim := limit.Per(100, time.Hour)
	a := oldShare(t, nodes[0], 2, 0, ShareReport{Key: "k", Limit: lim, Grant: GrantOne / 2, Demand: 100, Claim: true})
	g := oldShare(t, nodes[0], 2, a.Now+1, ShareReport{Key: "k", Limit: lim, Grant: a.Grant, Demand: 100, Applied: a.Seq})
	require.Equal(t, int64(GrantOne/2), g.Growth)
	// The node never got g: it reports again with a's sequence and the half.
	again := oldShare(t, nodes[0], 2, a.Now+1, ShareReport{Key: "k", Limit: lim, Grant: a.Grant, Demand: 100, Applied: a.Seq})
	assert.False(t, again.Over, "the growth it never got is not counted as held")
	assert.Equal(t, int64(GrantOne), again.Grant, "and it is granted again")
	assert.Equal(t, int64(GrantOne/2), again.Growth)
}

// TestHeavyRequestGrowsAsFarAsItNeeds: a request too heavy for the node's
// share is admitted when the pool has room for it, and not otherwise.
func TestHeavyRequestGrowsAsFarAsItNeeds(t *testing.T) {
	for _, lim := range []limit.Limit{
		limit.Per(100, time.Hour),
		limit.Per(100, time.Hour).WithAlgorithm(limit.FixedWindow),
		limit.Per(100, time.Hour).WithAlgorithm(limit.SlidingWindowCounter),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			nodes := shareFleet(t, 1, Options{})
			w := time.Now().UnixNano() / int64(lim.Period)
			a := oldShare(t, nodes[0], 4, 0, ShareReport{Key: "h", Limit: lim, Grant: even4, Demand: 1, Claim: true,
				State: limit.State{Window: w}, Heavy: 60})
			assert.False(t, a.Admitted, "before the fleet acked, the pool is empty")
			b := oldShare(t, nodes[0], 4, a.Now+1, ShareReport{Key: "h", Limit: lim, Grant: a.Grant, Demand: 1,
				State: limit.State{Window: w}, Heavy: 60, Applied: a.Seq})
			assert.True(t, b.Admitted)
			assert.True(t, b.FromPool, "served from the pool, which holds its spend")
			spent, err := nodes[0].AsyncLedger(bg, "h", lim)
			require.NoError(t, err)
			assert.Equal(t, int64(60), spent, "the heavy request is in the ledger")
		})
	}
}

// TestLostStateIsTold: a node that had a record and finds none is told.
func TestLostStateIsTold(t *testing.T) {
	nodes := shareFleet(t, 1, Options{})
	lim := limit.Per(100, time.Hour)
	a := oldShare(t, nodes[0], 1, 0, ShareReport{Key: "k", Limit: lim, Grant: GrantOne, Demand: 1, Claim: true})
	assert.False(t, a.Lost)
	_, err := nodes[0].client.Del(bg, asyncKey(nodes[0].prefix, lim, "k")).Result()
	require.NoError(t, err)
	b := oldShare(t, nodes[0], 1, 0, ShareReport{Key: "k", Limit: lim, Grant: GrantOne, Demand: 1, Applied: a.Seq})
	assert.True(t, b.Lost)
}

// TestLedgerIsIdempotentAcrossBothScripts: spend of a key decided alone goes
// to its ledger by ledger.lua, and a later report of the same counter by
// contest.lua adds only what is new.
func TestLedgerIsIdempotentAcrossBothScripts(t *testing.T) {
	nodes := shareFleet(t, 1, Options{})
	lim := limit.PerMinute(100)
	errs := make([]error, 1)
	entries := []LedgerEntry{{Key: "k", Limit: lim, Epoch: 7, Total: 5}}
	require.NoError(t, nodes[0].AddToLedgers(bg, entries, errs))
	require.NoError(t, nodes[0].AddToLedgers(bg, entries, errs), "sent twice")
	oldShare(t, nodes[0], 1, 0, ShareReport{Key: "k", Limit: lim, Grant: GrantOne, Epoch: 7, Total: 8, Acked: 5, Claim: true})
	spent, err := nodes[0].AsyncLedger(bg, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(8), spent)
}

// TestClaimsReachEveryNode: a claim made by one node is returned to every
// node's heartbeat once, acked when every active node has processed it,
// recalled on request, and gone when it expires.
func TestClaimsReachEveryNode(t *testing.T) {
	nodes := shareFleet(t, 2, Options{ActiveWindow: 5 * time.Second})
	lim := limit.PerSecond(10).WithBurst(3)
	beat := func(i int, hb *Heartbeat) {
		require.NoError(t, nodes[i].Beat(bg, hb))
	}
	a, b := &Heartbeat{Limit: 100}, &Heartbeat{Limit: 100}
	beat(0, a)
	beat(1, b)
	assert.Equal(t, 2, b.Nodes)

	a = &Heartbeat{Mark: a.Now, From: a.Next, Limit: 100, Claims: []Claim{{Key: "odd|key{1}", Limit: lim, Expiry: time.Now().Add(time.Hour).UnixNano()}}}
	beat(0, a)
	claimed := a.Now
	assert.Len(t, a.Changed, 1, "its own claim comes back too")
	b = &Heartbeat{Mark: b.Now, From: b.Next, Limit: 100}
	beat(1, b)
	require.Len(t, b.Changed, 1)
	assert.Equal(t, "odd|key{1}", b.Changed[0].Key)
	assert.Equal(t, lim.Canonical(), b.Changed[0].Limit)
	assert.Less(t, b.Acked, claimed, "b has not processed it yet")

	b = &Heartbeat{Mark: b.Now, From: b.Next, Limit: 100}
	beat(1, b)
	assert.Empty(t, b.Changed, "returned once")
	a = &Heartbeat{Mark: a.Now, From: a.Next, Limit: 100}
	beat(0, a)
	assert.GreaterOrEqual(t, a.Acked, claimed, "both processed it")

	// A recall comes back to everyone as a change.
	a = &Heartbeat{Mark: a.Now, From: a.Next, Limit: 100, Claims: []Claim{{Key: "odd|key{1}", Limit: lim, Expiry: time.Now().Add(time.Hour).UnixNano(), Recalling: true}}}
	beat(0, a)
	b = &Heartbeat{Mark: b.Now, From: b.Next, Limit: 100}
	beat(1, b)
	require.Len(t, b.Changed, 1)
	assert.Positive(t, b.Changed[0].Recall)

	// An expired claim is gone.
	a = &Heartbeat{Mark: a.Now, From: 0, Limit: 100, Claims: []Claim{{Key: "short", Limit: lim, Expiry: time.Now().Add(50 * time.Millisecond).UnixNano()}}}
	beat(0, a)
	time.Sleep(100 * time.Millisecond)
	a = &Heartbeat{Mark: a.Now, From: 0, Limit: 100}
	beat(0, a)
	for _, c := range a.Changed {
		assert.NotEqual(t, "short", c.Key)
	}
}

func TestClaimMembersRoundTrip(t *testing.T) {
	for _, lim := range []limit.Limit{
		limit.PerSecond(10), limit.PerSecond(10).WithBurst(3), limit.PerMinute(7).WithAlgorithm(limit.FixedWindow),
		limit.Per(5, 1500*time.Millisecond).WithAlgorithm(limit.SlidingWindowCounter), limit.PerHour(1).WithAlgorithm(limit.LeakyBucket),
	} {
		for _, key := range []string{"k", "a|b|c", "{x}", "пользователь"} {
			k, l, ok := parseClaimMember(claimMember(key, lim))
			require.True(t, ok, "%s %v", key, lim)
			assert.Equal(t, key, k)
			assert.Equal(t, lim.Canonical(), l)
		}
	}
	_, _, ok := parseClaimMember("tb|nonsense|k")
	assert.False(t, ok)
}

// TestContestBatchesManyKeys: one call carries many keys of every kind, and
// each answer is its own key's.
func TestContestBatchesManyKeys(t *testing.T) {
	nodes := shareFleet(t, 1, Options{})
	lims := []limit.Limit{
		limit.Per(100, time.Hour),
		limit.Per(50, time.Hour).WithAlgorithm(limit.FixedWindow),
		limit.Per(70, time.Hour).WithAlgorithm(limit.SlidingWindowCounter),
		limit.Per(10, time.Hour).WithAlgorithm(limit.LeakyBucket),
	}
	var reports []ShareReport
	for i := range 450 { // more than one call's worth
		lim := lims[i%len(lims)]
		reports = append(reports, ShareReport{Key: fmt.Sprintf("k%d", i), Limit: lim, Grant: GrantOne, Demand: 1,
			Now: time.Now().UnixNano(), Epoch: 1, Total: int64(i % 7), Heavy: int64(i % 3), Claim: true,
			State: limit.State{Window: time.Now().UnixNano() / int64(lim.Period)}})
	}
	round := ShareRound{Fleet: 1}
	require.NoError(t, nodes[0].Contest(bg, reports, &round))
	for i, a := range round.Answers {
		require.NoError(t, a.Err, "key %d", i)
		assert.Equal(t, int64(GrantOne), a.Grant, "key %d", i)
		assert.Equal(t, reports[i].Heavy > 0, a.Admitted, "key %d", i)
		spent, err := nodes[0].AsyncLedger(bg, reports[i].Key, reports[i].Limit)
		require.NoError(t, err)
		assert.Equal(t, reports[i].Total+reports[i].Heavy, spent, "key %d", i)
	}
}
