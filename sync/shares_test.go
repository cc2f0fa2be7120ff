package reconcile

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
)

// shareNode is one node of an Async fleet, driven round by round.
type shareNode struct {
	engine *local.Engine
	store  *remote.Store
	r      *Reconciler
}

// shareFleet makes n Async nodes on one private Redis.
func shareFleet(t *testing.T, n int, cfg Config, opts remote.Options) ([]*shareNode, *redistest.Server) {
	srv := redistest.Start(t)
	nodes := make([]*shareNode, n)
	for i := range nodes {
		c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		e, err := local.New(local.Config{TrackSpend: true, KeepOrphans: cfg.Ledger})
		require.NoError(t, err)
		o := opts
		o.Node = fmt.Sprintf("n%d", i)
		s, err := remote.New(c, o)
		require.NoError(t, err)
		b := breaker.New(breaker.Settings{Timeout: time.Second, OpenFor: 50 * time.Millisecond})
		cfg := cfg
		cfg.Shares = true
		r, err := New(cfg, Deps{Engine: e, Store: s, Breaker: b, Clock: clock.Real{}, Offset: clock.NewOffset(time.Now())})
		require.NoError(t, err)
		nodes[i] = &shareNode{engine: e, store: s, r: r}
	}
	return nodes, srv
}

// rounds runs k rounds on every node, in turn.
func rounds(t *testing.T, nodes []*shareNode, k int) {
	t.Helper()
	for range k {
		for _, n := range nodes {
			require.NoError(t, n.r.Round(bg))
		}
	}
}

func (n *shareNode) admit(t *testing.T, key string, lim limit.Limit, k int) int {
	t.Helper()
	got := 0
	for range k {
		res, err := n.engine.AllowN(time.Now().UnixNano(), key, lim, 1)
		if err == local.ErrEscalate {
			continue
		}
		require.NoError(t, err)
		if res.Allowed {
			got++
		}
	}
	return got
}

// TestPrivateKeysCostRedisNothing: keys no node needs more of are decided in
// each node's even split, round after round, with the heartbeat alone.
func TestPrivateKeysCostRedisNothing(t *testing.T) {
	nodes, _ := shareFleet(t, 2, Config{}, remote.Options{})
	rounds(t, nodes, 1)
	hook := &batchHook{}
	nodes[0].store.Client().AddHook(hook)
	lim := limit.Per(100, time.Hour)
	for i := range 2000 {
		nodes[i%2].admit(t, fmt.Sprintf("cold%d", i), lim, 1+i%10)
	}
	rounds(t, nodes, 5)
	for _, p := range hook.pipelines() {
		assert.Equal(t, 5, p, "the heartbeat's five keys, nothing else")
	}
	assert.Zero(t, nodes[0].r.Stats().Claims)
}

// TestAKeyOnOneNodeGetsTheWholeLimit: a key every request of which lands on
// one node starts in that node's even split, and once the fleet has given
// way (within a few rounds), the node holds the whole limit.
func TestAKeyOnOneNodeGetsTheWholeLimit(t *testing.T) {
	nodes, _ := shareFleet(t, 4, Config{}, remote.Options{})
	rounds(t, nodes, 2) // every node has seen the whole fleet
	lim := limit.Per(100, time.Hour)
	first := nodes[0].admit(t, "k", lim, 100)
	assert.Equal(t, 25, first, "an even split of four")
	rounds(t, nodes, 4)
	more := nodes[0].admit(t, "k", lim, 100)
	assert.Equal(t, 75, more, "the rest of the limit, once the other nodes gave their splits up")
	assert.Equal(t, uint64(1), nodes[0].r.Stats().Claims)
	for _, n := range nodes[1:] {
		assert.Zero(t, n.admit(t, "k", lim, 10), "the others hold nothing of it now")
	}
}

// TestSharesFollowDemandAndNeverExceedTheLimit: a key spent on everywhere,
// with most demand on one node, ends up shared by demand, and the fleet
// together never admits more than the limit.
func TestSharesFollowDemandAndNeverExceedTheLimit(t *testing.T) {
	nodes, _ := shareFleet(t, 4, Config{}, remote.Options{})
	rounds(t, nodes, 2)              // every node has seen the whole fleet
	lim := limit.Per(400, time.Hour) // nothing refills: every admission counts
	total := 0
	for step := range 30 {
		for i, n := range nodes {
			k := 2
			if i == 0 {
				k = 20
			}
			total += n.admit(t, "k", lim, k)
		}
		_ = step
		rounds(t, nodes, 1)
	}
	assert.LessOrEqual(t, total, 400, "never more than the limit")
	assert.GreaterOrEqual(t, total, 380, "and nearly all of it, though demand was uneven")
	g0, _ := nodes[0].engine.ShareOf("k", lim)
	g1, _ := nodes[1].engine.ShareOf("k", lim)
	assert.Greater(t, g0, g1, "the busy node holds more")
}

// TestHeavyRequestWaitsForTheFleet: a request heavier than the node's even
// split claims the key and waits while the fleet gives way.
func TestHeavyRequestWaitsForTheFleet(t *testing.T) {
	nodes, _ := shareFleet(t, 3, Config{Interval: 10 * time.Millisecond, EscalationWait: 2 * time.Second, Ledger: true}, remote.Options{})
	rounds(t, nodes, 2)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range nodes { // every node runs its rounds
		wg.Add(1)
		go func() { defer wg.Done(); n.r.Run(ctx) }()
	}
	lim := limit.Per(90, time.Hour)
	_, err := nodes[0].engine.AllowN(time.Now().UnixNano(), "big", lim, 60)
	require.ErrorIs(t, err, local.ErrEscalate, "60 > a third of 90")
	escalate := func() bool { // as hybrid does: ask, and ask again while the fleet makes room
		deadline := time.Now().Add(nodes[0].r.EscalationWait())
		for {
			esc, err := nodes[0].r.Escalate(bg, "big", lim, 60, time.Second)
			require.NoError(t, err)
			if esc.Admitted || time.Now().After(deadline) {
				return esc.Admitted
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	assert.True(t, escalate(), "admitted once the fleet gave way")
	assert.False(t, escalate(), "60 + 60 > 90")
	cancel()
	wg.Wait()
	require.NoError(t, nodes[0].r.Flush(bg))
	spent, err := nodes[0].store.AsyncLedger(bg, "big", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(60), spent)
}

// TestFlushPutsEveryAdmissionInTheLedger: spend decided alone and spend on
// contested keys reach the ledger, once, when the nodes stop.
func TestFlushPutsEveryAdmissionInTheLedger(t *testing.T) {
	nodes, _ := shareFleet(t, 2, Config{Ledger: true}, remote.Options{})
	rounds(t, nodes, 2)
	lim := limit.Per(50, time.Hour)
	admitted := map[string]int{}
	for round := range 5 {
		for i, n := range nodes {
			for _, key := range []string{"cold", "hot"} {
				k := 1
				if key == "hot" {
					k = 20
				}
				admitted[key] += n.admit(t, key, lim, k)
			}
			_ = i
		}
		_ = round
		rounds(t, nodes, 1)
	}
	for _, n := range nodes {
		require.NoError(t, n.r.Flush(bg))
	}
	for key, want := range admitted {
		spent, err := nodes[0].store.AsyncLedger(bg, key, lim)
		require.NoError(t, err)
		assert.Equal(t, int64(want), spent, key)
	}
	assert.LessOrEqual(t, admitted["hot"], 50)
}

// TestAnIdleClaimReturnsToEvenSplits: once nobody needs more than an even
// split and the claim's time has passed, the key is decided alone again.
func TestAnIdleClaimReturnsToEvenSplits(t *testing.T) {
	nodes, _ := shareFleet(t, 2, Config{Interval: 5 * time.Millisecond},
		remote.Options{Lease: 100 * time.Millisecond, ShortLease: 20 * time.Millisecond})
	rounds(t, nodes, 2)
	lim := limit.Per(10, 100*time.Millisecond) // refills in 100 ms
	nodes[0].admit(t, "k", lim, 20)
	rounds(t, nodes, 4)
	require.True(t, nodes[0].r.Contested("k", lim))
	deadline := time.Now().Add(5 * time.Second)
	for nodes[0].r.Contested("k", lim) && time.Now().Before(deadline) {
		for _, n := range nodes {
			n.r.expireShares()
			require.NoError(t, n.r.Round(bg))
		}
		time.Sleep(10 * time.Millisecond)
	}
	assert.False(t, nodes[0].r.Contested("k", lim), "the claim lapsed")
	s, ok := nodes[0].engine.ShareOf("k", lim)
	require.True(t, ok)
	assert.Equal(t, local.ShareAmong(2), s, "an even split again")
}
