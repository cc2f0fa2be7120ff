package hybrid

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// exhaust spends key's whole limit and checks the next request is denied.
func exhaust(t *testing.T, l *Limiter, key string, lim Limit) {
	t.Helper()
	for range lim.Capacity() {
		_, err := l.Allow(bg, key, lim)
		require.NoError(t, err)
	}
	d, err := l.Allow(bg, key, lim)
	require.NoError(t, err)
	require.False(t, d.Allowed, "exhausted")
}

// After Reset a key admits again at once; the same key under another
// algorithm keeps its state.
func TestResetLocalOnly(t *testing.T) {
	l := newLimiter(t, Config{Clock: clock.NewManual(time.Unix(1_800_000_000, 0))})
	tb, fw := Per(3, time.Hour), Per(3, time.Hour).WithAlgorithm(FixedWindow)
	exhaust(t, l, "k", tb)
	exhaust(t, l, "w", fw)
	require.NoError(t, l.Reset(bg, "k", tb))
	require.NoError(t, l.Reset(bg, "w", tb), "w is held under another algorithm: nothing to do")
	admitted, _ := count(t, l, "k", tb, 4)
	assert.Equal(t, 3, admitted, "a full bucket again")
	admitted, _ = count(t, l, "w", fw, 1)
	assert.Zero(t, admitted)

	assert.ErrorIs(t, l.Reset(bg, "", tb), ErrInvalidKey)
	assert.ErrorIs(t, l.Reset(bg, "k", Per(0, time.Hour)), ErrInvalidLimit)
	require.NoError(t, l.Close(bg))
	assert.ErrorIs(t, l.Reset(bg, "k", tb), ErrClosed)
}

// In Sync mode a Reset on one node forgives the key on every node, of every
// algorithm. The other node keeps a copy of the key's state for degraded
// mode and sends it with its next decision, for Redis to restore a state
// it lost: the reset leaves a fresh state in Redis, so that copy does not
// undo it (it did for the buckets and the window counters: 0 admitted
// after the reset on the other node, and a state loss counted).
func TestResetSync(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []Algorithm{SlidingWindowLog, TokenBucket, FixedWindow, SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := Per(4, time.Hour).WithAlgorithm(alg)
			prefix := "reset:" + alg.String() + ":"
			a := newLimiter(t, Config{Redis: srv.Client(t), Mode: Sync, Prefix: prefix, RedisTimeout: 5 * time.Second})
			b := newLimiter(t, Config{Redis: srv.Client(t), Mode: Sync, Prefix: prefix, RedisTimeout: 5 * time.Second})
			exhaust(t, a, "k", lim)
			admitted, _ := count(t, b, "k", lim, 1)
			require.Zero(t, admitted)
			require.NoError(t, a.Reset(bg, "k", lim))
			admitted, _ = count(t, b, "k", lim, 3)
			assert.Equal(t, 3, admitted, "the other node sees the reset at once")
			admitted, _ = count(t, a, "k", lim, 3)
			assert.Equal(t, 1, admitted, "one left of the fresh four")
			assert.Zero(t, b.Stats().StateLost, "a reset is not a loss")
		})
	}
}

// In Async mode the node that resets admits at once; the other nodes, which
// hold the key exhausted, learn of the reset within a few rounds, and the
// fleet admits no more after the reset than the limit's capacity (with the
// slack of a fleet change, C·(N−1)/N): a reset never hands out a fresh
// burst per node.
func TestResetAsync(t *testing.T) {
	srv := redistest.Start(t)
	lim := Per(20, time.Hour).WithBurst(20)
	// The reset's first request asks the fleet when this node had given
	// its share away before the reset: AskWait is long enough for a loaded
	// machine to answer it (what this test is about is what a reset
	// forgives, not how fast an ask is answered).
	cfg := Config{Redis: srv.Client(t), Prefix: "reset:", SyncInterval: 5 * time.Millisecond, AskWait: 2 * time.Second}
	nodes := []*Limiter{newLimiter(t, cfg), newLimiter(t, cfg), newLimiter(t, cfg)}
	// Every node exhausts the key, and learns that the fleet has. A node
	// refused while the store still had room (an ask answered before the
	// room moved) asks again within two intervals and may be admitted:
	// the fleet is exhausted once every node is refused after the rounds
	// that follow. What it admitted stays within the limit and the slack
	// of the fleet's start (three nodes started together without
	// FleetSize: C·(N−1)/N).
	spent := 0
	exhausted := func() bool {
		all := true
		for _, l := range nodes {
			d, _ := l.Allow(bg, "k", lim)
			if d.Allowed {
				spent++
			}
			all = all && !d.Allowed
		}
		return all
	}
	settled := false
	for range 10 {
		require.Eventually(t, exhausted, 10*time.Second, time.Millisecond)
		for _, l := range nodes {
			rounds := l.Stats().Reconcile.Rounds
			require.Eventually(t, func() bool { return l.Stats().Reconcile.Rounds > rounds+1 }, 10*time.Second, time.Millisecond)
		}
		if settled = exhausted(); settled {
			break
		}
	}
	require.True(t, settled, "still exhausted after the rounds")
	assert.LessOrEqual(t, float64(spent), 20+20*2/3.0, "the fleet admitted its burst, and at most the slack of its start")
	t.Logf("the fleet admitted %d of a burst of 20 before the reset", spent)

	require.NoError(t, nodes[0].Reset(bg, "k", lim))
	d, err := nodes[0].Allow(bg, "k", lim)
	require.NoError(t, err)
	// From memory if it held a share of the key, else from the pool the
	// reset made fresh: never refused.
	assert.True(t, d.Allowed, "the resetting node admits at once (source %v)", d.Source)
	admitted := 1
	seen := make([]bool, len(nodes))
	seen[0] = true
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, l := range nodes {
			d, err := l.Allow(bg, "k", lim)
			require.NoError(t, err)
			if d.Allowed {
				admitted++
				seen[i] = true
			}
		}
		if seen[1] && seen[2] && time.Now().After(deadline.Add(-9*time.Second)) {
			break // every node forgave, and a second of asking is over
		}
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, []bool{true, true, true}, seen, "every node admits again")
	t.Logf("admitted after the reset: %d (capacity 20)", admitted)
	assert.LessOrEqual(t, admitted, 20+20*2/3, "no fresh burst per node")
	assert.GreaterOrEqual(t, admitted, 10, "the reset gave the key back")
	assert.Positive(t, nodes[1].Stats().Reconcile.Shares.Resets+nodes[2].Stats().Reconcile.Shares.Resets)
}

// A Reset in Async mode forgives the key but keeps what was admitted on it
// in its ledger: usage is history, not state.
func TestResetAsyncKeepsTheLedger(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	l, err := New(Config{Redis: srv.Client(t), Prefix: "reset:", SyncInterval: time.Hour, Clock: clk, Ledger: true})
	require.NoError(t, err)
	lim := Per(5, time.Hour)
	exhaust(t, l, "k", lim)
	require.NoError(t, l.Reset(bg, "k", lim))
	admitted, _ := count(t, l, "k", lim, 6)
	assert.Equal(t, 5, admitted, "a fresh bucket")
	require.NoError(t, l.Close(bg), "the last round reports what is left")
	n, err := l.store.AsyncLedger(bg, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(10), n, "both the five before the reset and the five after it")
}

// Without Redis, a Reset in a Redis mode fails and changes nothing: the
// caller knows the client was not forgiven.
func TestResetWithoutRedis(t *testing.T) {
	lim := Per(3, time.Hour)
	for _, mode := range []Mode{Async, Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := deadRedis(t)
			cfg.Mode = mode
			l := newLimiter(t, cfg)
			exhaust(t, l, "k", lim)
			for range 4 { // the failures open the breaker; then it is refused at once
				assert.Error(t, l.Reset(bg, "k", lim))
			}
			admitted, _ := count(t, l, "k", lim, 1)
			assert.Zero(t, admitted, "still limited")
		})
	}
}
