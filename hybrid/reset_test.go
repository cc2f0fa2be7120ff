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

// In Sync mode a Reset on one node forgives the key on every node.
func TestResetSync(t *testing.T) {
	srv := redistest.Start(t)
	lim := Per(4, time.Hour).WithAlgorithm(SlidingWindowLog)
	a := newLimiter(t, Config{Redis: srv.Client(t), Mode: Sync, Prefix: "reset:", RedisTimeout: 5 * time.Second})
	b := newLimiter(t, Config{Redis: srv.Client(t), Mode: Sync, Prefix: "reset:", RedisTimeout: 5 * time.Second})
	exhaust(t, a, "k", lim)
	admitted, _ := count(t, b, "k", lim, 1)
	require.Zero(t, admitted)
	require.NoError(t, a.Reset(bg, "k", lim))
	admitted, _ = count(t, b, "k", lim, 3)
	assert.Equal(t, 3, admitted, "the other node sees the reset at once")
	admitted, _ = count(t, a, "k", lim, 3)
	assert.Equal(t, 1, admitted, "one left of the fresh four")
}

// In Async mode the node that resets admits at once; another node that
// keeps deciding on the key learns of the reset at its next round.
func TestResetAsync(t *testing.T) {
	srv := redistest.Start(t)
	lim := Per(20, time.Hour).WithBurst(20)
	cfg := Config{Redis: srv.Client(t), Prefix: "reset:", SyncInterval: 5 * time.Millisecond}
	a, b := newLimiter(t, cfg), newLimiter(t, cfg)
	// Both exhaust the key, and each learns that the fleet has.
	require.Eventually(t, func() bool {
		da, _ := a.Allow(bg, "k", lim)
		db, _ := b.Allow(bg, "k", lim)
		return !da.Allowed && !db.Allowed
	}, 10*time.Second, time.Millisecond)
	for _, l := range []*Limiter{a, b} {
		rounds := l.Stats().Reconcile.Rounds
		require.Eventually(t, func() bool { return l.Stats().Reconcile.Rounds > rounds+1 }, 10*time.Second, time.Millisecond)
	}
	d, _ := a.Allow(bg, "k", lim)
	require.False(t, d.Allowed, "still exhausted after the rounds")

	require.NoError(t, a.Reset(bg, "k", lim))
	d, err := a.Allow(bg, "k", lim)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the resetting node admits at once")
	assert.Equal(t, Local, d.Source)
	require.Eventually(t, func() bool {
		d, err := b.Allow(bg, "k", lim)
		require.NoError(t, err)
		return d.Allowed
	}, 10*time.Second, time.Millisecond, "the other node admits after its next round on the key")
}

// A Reset in Async mode drops the key's spend this node has not reported
// yet: Redis never hears of it.
func TestResetAsyncDropsUnreportedSpend(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	l, err := New(Config{Redis: srv.Client(t), Prefix: "reset:", SyncInterval: time.Hour, Clock: clk})
	require.NoError(t, err)
	lim := Per(5, time.Hour)
	exhaust(t, l, "k", lim)
	_, _ = count(t, l, "other", lim, 2)
	require.NoError(t, l.Reset(bg, "k", lim))
	require.NoError(t, l.Close(bg), "the last round reports what is left")
	n, err := srv.Do("EXISTS", "reset:tb:{k}")
	require.NoError(t, err)
	assert.Equal(t, int64(0), n, "the reset key's spend was never reported")
	n, err = srv.Do("EXISTS", "reset:tb:{other}")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the other key's was")
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
