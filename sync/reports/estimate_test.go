package reports

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/remote"
)

// What a node offers Redis to restore a lost key from leaves out the spend
// its reports add, and only that: these are the ways it once left out too
// much, or panicked.

// takeAsAFailedRound moves the engine's spend into the counters, as a round
// whose report then failed (or is still in flight) leaves it: pending.
func takeAsAFailedRound(f *fixture) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	for _, s := range f.engine.TakeSpend(nil) {
		f.r.counters.add(s, time.Now())
	}
}

// A sync decision seeds the engine from Redis's state, which lacks the
// node's pending spend (its report failed): the engine must hold that
// pending on top, as the estimate leaves it out. Seeded without it, the
// estimate was 61 where Redis held 241, and a key lost then was restored
// to 122 for 302 admitted.
func TestEstimateAfterASyncDecisionWithSpendPending(t *testing.T) {
	f := newFixture(t, Config{FleetSize: 3})
	warmUp(t, f)
	lim := limit.Per(300, time.Hour).WithAlgorithm(limit.FixedWindow)
	other, err := remote.New(f.store.Client(), remote.Options{Node: "other"})
	require.NoError(t, err)
	_, err = other.AllowN(bg, "k", lim, 240) // the rest of the fleet spent 240
	require.NoError(t, err)

	_, rnow := f.r.now()
	res, err := f.engine.AllowDegraded(rnow, "k", lim, 60) // degraded; taken, its report failed
	require.NoError(t, err)
	require.True(t, res.Allowed)
	takeAsAFailedRound(f)

	// A sync decision, and the seed that follows it (hybrid's keepWarm).
	_, rnow = f.r.now()
	d, err := f.store.AllowNKnown(bg, "k", lim, 1, remote.Known{Estimate: f.r.Estimate("k", lim), Now: rnow})
	require.NoError(t, err)
	require.Equal(t, int64(241), d.State.Count)
	pending, _, ok := f.r.Pending("k", lim)
	require.True(t, ok)
	assert.Equal(t, int64(60), pending)
	require.NoError(t, f.engine.Seed(rnow, "k", lim, d.State, f.engine.DefaultShare(), pending, false))
	est := f.r.Estimate("k", lim)
	assert.Equal(t, int64(241), est.Count, "Redis's state, without the pending 60")

	require.NoError(t, f.srv.Client(t).FlushAll(bg).Err()) // Redis loses the key
	_, rnow = f.r.now()
	_, err = f.store.AllowNKnown(bg, "k", lim, 1, remote.Known{Estimate: est, Now: rnow})
	require.NoError(t, err)
	require.NoError(t, f.r.Round(bg)) // the pending 60 reported
	got, err := f.store.AllowN(bg, "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(240+60+2), got.State.Count, "every admitted request counted once")
}

// A report of a window left behind carries that window's pending: it is not
// taken out of the current window's estimate. It was, and a key lost then
// had its current window restored to 0 instead of 40.
func TestEstimateOfAReportOfAnOldWindow(t *testing.T) {
	f := newFixture(t, Config{FleetSize: 4})
	lim := limit.Per(100, time.Hour).WithAlgorithm(limit.FixedWindow)
	period := int64(time.Hour)
	_, rnow := f.r.now()
	w := rnow / period
	prev := (w - 1) * period

	// In window w-1, degraded: 12 spent and acknowledged, then 10 more.
	res, err := f.engine.AllowDegraded(prev+1, "k", lim, 12)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.NoError(t, f.r.Round(bg))
	res, err = f.engine.AllowDegraded(prev+2, "k", lim, 10)
	require.NoError(t, err)
	require.True(t, res.Allowed)

	// Window w: the rest of the fleet spent 40, and this node knows it.
	other, err := remote.New(f.store.Client(), remote.Options{Node: "other"})
	require.NoError(t, err)
	d, err := other.AllowN(bg, "k", lim, 40)
	require.NoError(t, err)
	require.Equal(t, limit.State{Window: w, Count: 40}, d.State)
	_, rnow = f.r.now()
	require.NoError(t, f.engine.Seed(rnow, "k", lim, d.State, f.engine.DefaultShare(), 0, false))
	est, _ := f.engine.Estimate("k", lim, 0, w)
	require.Equal(t, limit.State{Window: w, Count: 40}, est)

	// Redis loses the key; the round reports w-1's 10 (12 acknowledged): lost.
	require.NoError(t, f.srv.Client(t).FlushAll(bg).Err())
	require.NoError(t, f.r.Round(bg))
	got, err := f.store.AllowN(bg, "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(40), got.State.Count, "window w restored to what the node knew of it")
}

// An invalid limit (a window without a period) is the store's to refuse:
// the estimate neither panics nor holds the reporter's lock. It panicked
// with the lock held, and every later decision, round and Close waited.
func TestEstimateOfAnInvalidLimit(t *testing.T) {
	f := newFixture(t, Config{})
	bad := limit.Limit{Rate: 10, Algorithm: limit.FixedWindow} // Period 0
	require.Error(t, bad.Validate())
	assert.NotPanics(t, func() { _ = f.r.Estimate("k", bad) })
	require.True(t, f.r.mu.TryLock(), "the reporter's lock is free")
	f.r.mu.Unlock()
}

// While a round holds the reporter, a decision does not wait for it: the
// pending spend is then unknown, and the estimate errs high (Redis may
// restore the key above what was spent, never below).
func TestEstimateDoesNotWaitOnARound(t *testing.T) {
	f := newFixture(t, Config{FleetSize: 2})
	lim := limit.Per(100, time.Hour)
	_, rnow := f.r.now()
	_, err := f.engine.AllowDegraded(rnow, "k", lim, 10)
	require.NoError(t, err)
	takeAsAFailedRound(f)
	known := f.r.Estimate("k", lim)

	f.r.mu.Lock() // a round
	_, _, ok := f.r.Pending("k", lim)
	unknown := f.r.Estimate("k", lim)
	f.r.mu.Unlock()
	assert.False(t, ok)
	assert.Greater(t, unknown.TAT, known.TAT, "the pending 10 stays in, at the node's share")
}
