package local

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

func TestConcurrentDecidersNeverOverAdmit(t *testing.T) {
	e := newEngine(t, Config{Shards: 4})
	lim := limit.PerSecond(1000).WithBurst(500)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				// Every goroutine decides at the same frozen instant on the
				// same hot key, and on keys of its own.
				res, err := e.AllowN(t0, "hot", lim, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
				_, _ = e.AllowN(t0, fmt.Sprintf("g%d-%d", g, i%10), lim, 1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(500), admitted.Load(), "exactly the burst at a frozen instant")
}

func TestTakeSpend(t *testing.T) {
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
	lim := limit.PerSecond(10).WithBurst(5)
	for range 7 {
		_, err := e.AllowN(t0, "a", lim, 1)
		require.NoError(t, err)
	}
	_, _ = e.AllowN(t0, "b", lim, 2)
	_, _ = e.AllowN(t0, "c", lim, 0) // a peek is no demand

	spends := byKey(e.TakeSpend(nil))
	require.Len(t, spends, 2)
	a := spends["a"][0]
	assert.Equal(t, [4]int64{5, 5, 7, t0}, [4]int64{a.Spent, a.Charge, a.Hits, a.Since}, "spent, charged, asked for, since")
	assert.True(t, a.Pressure, "two of the seven were denied")
	assert.Equal(t, int64(2), spends["b"][0].Spent)

	assert.Empty(t, e.TakeSpend(nil), "taking resets")
	_, _ = e.AllowN(t0, "a", lim, 1)
	spends = byKey(e.TakeSpend(nil))
	assert.Equal(t, int64(0), spends["a"][0].Spent, "denied: demand without spend")
	assert.Equal(t, int64(1), spends["a"][0].Hits)
}

func byKey(spends []Spend) map[string][]Spend {
	m := map[string][]Spend{}
	for _, s := range spends {
		m[s.Key] = append(m[s.Key], s)
	}
	return m
}

func TestNoTrackingNoSpend(t *testing.T) {
	e := newEngine(t, Config{})
	_, _ = e.AllowN(t0, "a", limit.PerSecond(10), 1)
	assert.Empty(t, e.TakeSpend(nil))
}

func TestEvictionKeepsUntakenSpend(t *testing.T) {
	e := newEngine(t, Config{Shards: 1, MaxKeys: 4, TrackSpend: true, KeepOrphans: true})
	lim := limit.PerSecond(100)
	for i := range 10 {
		_, err := e.AllowN(t0, fmt.Sprintf("k%d", i), lim, int64(i+1))
		require.NoError(t, err)
	}
	assert.Equal(t, 4, e.Len(), "bounded by MaxKeys")
	total := int64(0)
	for _, s := range e.TakeSpend(nil) {
		total += s.Spent
	}
	assert.Equal(t, int64(55), total, "every admitted request is reported, evicted or not")
}

func TestWindowRolloverKeepsSpendOfTheOldWindow(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
			lim := limit.PerSecond(100).WithAlgorithm(alg)
			_, _ = e.AllowN(at(100*time.Millisecond), "k", lim, 3)
			_, _ = e.AllowN(at(time.Second+100*time.Millisecond), "k", lim, 4)
			got := map[int64]int64{}
			for _, s := range e.TakeSpend(nil) {
				got[s.Window] += s.Spent
			}
			w := t0 / int64(time.Second)
			assert.Equal(t, map[int64]int64{w: 3, w + 1: 4}, got)
		})
	}
}

func TestTakeSpendWhileDeciding(t *testing.T) {
	e := newEngine(t, Config{Shards: 8, TrackSpend: true, KeepOrphans: true})
	lim := limit.PerSecond(1_000_000)
	var admitted atomic.Int64
	var reported atomic.Int64
	stop := make(chan struct{})
	taker := make(chan struct{})
	go func() {
		defer close(taker)
		var buf []Spend
		for {
			buf = e.TakeSpend(buf[:0])
			for _, s := range buf {
				reported.Add(s.Spent)
			}
			select {
			case <-stop:
				for _, s := range e.TakeSpend(nil) {
					reported.Add(s.Spent)
				}
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				res, err := e.AllowN(at(time.Duration(i)*time.Microsecond), fmt.Sprintf("k%d", (g*7+i)%50), lim, 1)
				if err == nil && res.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-taker
	assert.Equal(t, admitted.Load(), reported.Load(), "no spend is lost or counted twice")
}

func TestSweepForgetsOnlyIdleFullyTakenKeys(t *testing.T) {
	e := newEngine(t, Config{Shards: 1, TrackSpend: true, KeepOrphans: true})
	lim := limit.PerSecond(10)
	_, _ = e.AllowN(t0, "old", lim, 10)
	_, _ = e.AllowN(t0, "busy", lim, 10)
	e.TakeSpend(nil)
	assert.Equal(t, 0, e.Sweep(at(500*time.Millisecond), 100), "not yet refilled: nothing to forget")

	_, _ = e.AllowN(at(2*time.Second), "busy", lim, 1)
	// The shard's clock is at 2 s now, so a sweep asked for 1 s runs at 2 s:
	// old is refilled and reported; busy has spend not yet taken.
	assert.Equal(t, 1, e.Sweep(at(time.Second), 100))
	assert.Equal(t, 1, e.Len())

	e.TakeSpend(nil)
	assert.Equal(t, 1, e.Sweep(at(10*time.Second), 100))
	assert.Equal(t, 0, e.Len())
}

func TestSeedTakesItsShareOfTheGlobalState(t *testing.T) {
	lim := limit.PerSecond(100) // burst 100, T = 10 ms
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
	// Redis says 40 tokens remain globally: the TAT is 60 intervals ahead.
	g := limit.State{TAT: t0 + 60*int64(10*time.Millisecond)}
	require.NoError(t, e.Seed(t0, "k", lim, g, ShareOf(1, 4), 0, true))

	admitted := 0
	for range 100 {
		res, err := e.AllowN(t0, "k", lim, 1)
		require.NoError(t, err)
		if res.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 10, admitted, "a quarter of the 40 that remain")

	// The quarter refills at a quarter of the rate: 25/s, one per 40 ms.
	res, _ := e.AllowN(at(40*time.Millisecond), "k", lim, 1)
	assert.True(t, res.Allowed)
	res, _ = e.AllowN(at(40*time.Millisecond), "k", lim, 1)
	assert.False(t, res.Allowed)
	assert.Equal(t, 40*time.Millisecond, res.RetryAfter)
}

func TestSeedAddsSpendNotYetTaken(t *testing.T) {
	lim := limit.PerSecond(100)
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
	_, _ = e.AllowN(t0, "k", lim, 30) // taken below: the global state will hold it
	e.TakeSpend(nil)
	_, _ = e.AllowN(t0, "k", lim, 20) // in flight while the round runs: not yet in Redis
	g := limit.State{TAT: t0 + 30*int64(10*time.Millisecond)}
	require.NoError(t, e.Seed(t0, "k", lim, g, ShareOne, 0, false))
	res, _ := e.AllowN(t0, "k", lim, 0)
	assert.Equal(t, int64(50), res.Remaining, "100 - 30 reported - 20 pending")
}

func TestSeedWindows(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := limit.PerSecond(100).WithAlgorithm(alg)
			e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
			w := t0 / int64(time.Second)
			require.NoError(t, e.Seed(t0, "k", lim, limit.State{Window: w, Count: 60}, ShareOf(1, 2), 0, true))
			admitted := 0
			for range 100 {
				res, _ := e.AllowN(t0, "k", lim, 1)
				if res.Allowed {
					admitted++
				}
			}
			assert.Equal(t, 20, admitted, "half of the 40 left")
		})
	}
}

func TestDegradedShare(t *testing.T) {
	lim := limit.PerSecond(100)
	cases := []struct {
		name      string
		fixed     int
		seen      int
		aloneOnIt bool // Redis had granted this node the whole key before it failed
		wantBurst int
	}{
		{"fleet size configured", 5, 3, false, 20},
		{"more nodes seen than configured", 2, 4, false, 25},
		{"nodes last seen in the fleet", 0, 3, false, 33},
		{"a key this node had to itself is still divided by the fleet", 0, 4, true, 25},
		{"alone", 0, 1, false, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
			e.SetFleet(tc.fixed, tc.seen)
			if tc.aloneOnIt {
				require.NoError(t, e.Seed(t0, "k", lim, limit.State{}, ShareOne, 0, true))
			}
			e.SetDegraded(true)
			require.True(t, e.Degraded())
			admitted := 0
			for range 200 {
				res, _ := e.AllowN(t0, "k", lim, 1)
				if res.Allowed {
					admitted++
				}
			}
			assert.Equal(t, tc.wantBurst, admitted)
			reported := int64(0)
			for _, s := range e.TakeSpend(nil) {
				reported += s.Spent
				assert.True(t, s.Degraded)
			}
			assert.Equal(t, int64(tc.wantBurst), reported, "spend is still recorded while degraded")
		})
	}
}

func TestHeavyRequestUnderASmallShare(t *testing.T) {
	// A node with a tenth of a 10-token burst: a light request fits its
	// share.
	lim := limit.PerSecond(10)
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
	e.SetFleet(0, 10)
	require.NoError(t, e.Seed(t0, "k", lim, limit.State{}, ShareOf(1, 10), 0, true))
	res, err := e.AllowN(t0, "k", lim, 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "the light request still fits the share")

	// Degraded, nobody can be asked, and every node could admit it at once:
	// it is refused, and counted; light requests still pass.
	e.SetDegraded(true)
	res, _ = e.AllowDegraded(at(time.Second), "k", lim, 5)
	assert.False(t, res.Allowed)
	assert.Equal(t, time.Second, res.RetryAfter, "a hint: the limit's refill")
	assert.Equal(t, uint64(1), e.HeavyRefused())
	res, _ = e.AllowDegraded(at(time.Second), "k", lim, 1)
	assert.True(t, res.Allowed, "the refused request spent nothing")
}

func TestNewKeysStartWithAnEqualShare(t *testing.T) {
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
	e.SetFleet(0, 4)
	admitted := 0
	for range 100 {
		res, _ := e.AllowN(t0, "new", limit.PerSecond(100), 1)
		if res.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 25, admitted)
}

func TestShareOf(t *testing.T) {
	assert.Equal(t, ShareOne, ShareOf(1, 1))
	assert.Equal(t, ShareOne, ShareOf(5, 0))
	assert.Equal(t, ShareOne/4, ShareOf(1, 4))
	assert.Equal(t, Share(1), ShareOf(0, 100), "never zero")
	assert.Equal(t, ShareOne, ShareOf(3, 2), "never above one")
	assert.Equal(t, ShareOne/3+1, ShareAmong(3))
	assert.InDelta(t, 0.25, ShareAmong(4).Fraction(), 1e-9)
}

func TestNewRejectsNegativeConfig(t *testing.T) {
	_, err := New(Config{Shards: -1})
	assert.Error(t, err)
	e := newEngine(t, Config{Shards: 5})
	assert.Len(t, e.shards, 8, "rounded up to a power of two")
}

func TestRecordNRecordsSpendOnly(t *testing.T) {
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
	lim := limit.PerSecond(10)
	for range 3 {
		require.NoError(t, e.RecordN(t0, "k", lim, 7))
	}
	res, err := e.AllowN(t0, "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(10), res.Remaining, "the state is untouched")
	spends := e.TakeSpend(nil)
	require.Len(t, spends, 1)
	assert.Equal(t, int64(21), spends[0].Spent, "beyond what the bucket would have admitted")
	assert.ErrorIs(t, e.RecordN(t0, "k", lim, 11), limit.ErrExceedsCapacity)
	assert.ErrorIs(t, e.RecordN(t0, "", lim, 1), limit.ErrInvalidKey)
}

// Forget drops a key's state and its untaken spend: the key starts afresh
// and the reconciler is not told of what it spent before.
func TestForget(t *testing.T) {
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
	tb := limit.PerSecond(10).WithBurst(2)
	fw := limit.PerMinute(2).WithAlgorithm(limit.FixedWindow)
	log := limit.PerMinute(2).WithAlgorithm(limit.SlidingWindowLog)
	for _, k := range []struct {
		key string
		lim limit.Limit
	}{{"a", tb}, {"b", fw}, {"c", log}, {"keep", tb}} {
		for range 3 {
			_, err := e.AllowN(t0, k.key, k.lim, 1)
			require.NoError(t, err)
		}
	}
	// A limit change orphans the window's spend: that goes too.
	_, err := e.AllowN(t0, "b", limit.PerMinute(2).WithAlgorithm(limit.SlidingWindowCounter), 1)
	require.NoError(t, err)
	_, err = e.AllowN(t0, "b", fw, 1)
	require.NoError(t, err)

	assert.True(t, e.Forget("a", tb))
	assert.True(t, e.Forget("b", fw))
	assert.True(t, e.Forget("c", log))
	assert.False(t, e.Forget("keep", tb.WithAlgorithm(limit.LeakyBucket)), "held under another algorithm")
	assert.False(t, e.Forget("keep", limit.PerSecond(20).WithBurst(2)), "held under another limit")
	assert.False(t, e.Forget("nobody", tb))
	assert.False(t, e.Forget("", tb))

	spent := map[string]int64{}
	for _, s := range e.TakeSpend(nil) {
		spent[s.Key+" "+s.Limit.Algorithm.String()] += s.Spent
	}
	assert.Equal(t, map[string]int64{"keep token_bucket": 2, "b sliding_window_counter": 1}, spent,
		"only the kept key's spend, and the other algorithm's orphan")
	for _, k := range []struct {
		key string
		lim limit.Limit
	}{{"a", tb}, {"b", fw}, {"c", log}} {
		res, err := e.AllowN(t0, k.key, k.lim, 2)
		require.NoError(t, err)
		assert.True(t, res.Allowed, "%s starts afresh", k.key)
	}
	res, _ := e.AllowN(t0, "keep", tb, 1)
	assert.False(t, res.Allowed)
}

// The reconciler's bookkeeping runs on its own reading of the clock, which
// may be ahead of the deciders' (before its first round trip aligned them to
// Redis's): taking spend at a later time must not hold the deciders' clock
// there, buckets frozen until they catch up.
func TestBookkeepingDoesNotAdvanceDecisionTime(t *testing.T) {
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
	lim := limit.PerSecond(10).WithBurst(1)
	res, err := e.AllowN(t0, "k", lim, 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	later := t0 + int64(time.Hour)
	e.TakeDue(later, nil)
	e.TakeKey(later, "k", lim, nil)
	e.TakeSpend(nil)
	e.Sweep(later, 0)
	res, _ = e.AllowN(t0, "k", lim, 1)
	assert.False(t, res.Allowed, "the bucket is empty at t0")
	res, _ = e.AllowN(t0+int64(100*time.Millisecond), "k", lim, 1)
	assert.True(t, res.Allowed, "and refills as the deciders' clock moves")
}

// Restart starts a key afresh under one limit and keeps its share and its
// untaken spend (the ledger still gets it); the key's other limits keep
// their state. A limit written with its burst equal to its rate names the
// same state as without.
func TestRestart(t *testing.T) {
	for _, lim := range []limit.Limit{
		limit.PerMinute(4),
		limit.PerMinute(4).WithBurst(4),
		limit.PerMinute(4).WithAlgorithm(limit.FixedWindow),
		limit.PerMinute(4).WithAlgorithm(limit.SlidingWindowCounter),
	} {
		t.Run(lim.String(), func(t *testing.T) {
			e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
			other := limit.PerHour(4)
			for range 4 {
				_, err := e.AllowN(t0, "k", lim, 1)
				require.NoError(t, err)
				_, err = e.AllowN(t0, "k", other, 1)
				require.NoError(t, err)
			}
			require.True(t, e.Contest(t0, "k", lim, true, ShareOne/2, false))
			require.True(t, e.SetShare("k", lim, ShareOne/2))
			assert.True(t, e.Restart(t0, "k", lim.WithBurst(lim.Burst)))
			assert.False(t, e.Restart(t0, "nobody", lim))
			s, _ := e.ShareOf("k", lim)
			assert.Equal(t, ShareOne/2, s, "the share is kept")
			res, _ := e.AllowN(t0, "k", lim, 2)
			assert.True(t, res.Allowed, "afresh: half of four")
			res, _ = e.AllowN(t0, "k", other, 1)
			assert.False(t, res.Allowed, "the other limit keeps its state")
			spent := int64(0)
			for _, s := range e.TakeSpend(nil) {
				if s.Limit == lim.Canonical() {
					spent += s.Spent
				}
			}
			assert.Equal(t, int64(6), spent, "the spend before and after the restart")
		})
	}
}

// Keys denied and evicted while no round takes the due list (the breaker
// open through an outage) leave it bounded by the keys held, not by the
// traffic. Before: one entry per key ever denied, 13.7 MiB after a 5 s
// flood of new keys.
func TestDueListStaysBoundedWithoutTakes(t *testing.T) {
	e := newEngine(t, Config{TrackSpend: true, MaxKeys: 64})
	lim := limit.PerHour(1)
	for i := range 20_000 {
		k := fmt.Sprintf("k%d", i)
		_, _ = e.AllowN(t0, k, lim, 1)
		_, _ = e.AllowN(t0, k, lim, 1) // denied: due
	}
	due := 0
	for i := range e.shards {
		due += len(e.shards[i].due)
	}
	assert.LessOrEqual(t, due, len(e.shards)*(2*64+dueKeep), "bounded by the keys held")
	assert.Less(t, due, 20_000)
}

// A policy is its limit in every form that names the same state: the
// decision compares through a pointer what Canonical would have copied.
func TestPolicyIsItsLimitInEveryForm(t *testing.T) {
	limits := []limit.Limit{
		limit.PerSecond(10), limit.PerSecond(10).WithBurst(10), limit.PerSecond(10).WithBurst(5), limit.PerSecond(10).WithBurst(20),
		limit.PerSecond(10).WithAlgorithm(limit.LeakyBucket), limit.PerSecond(10).WithBurst(10).WithAlgorithm(limit.LeakyBucket),
		limit.PerSecond(10).WithAlgorithm(limit.FixedWindow), limit.PerSecond(10).WithBurst(10).WithAlgorithm(limit.FixedWindow),
		limit.PerSecond(10).WithAlgorithm(limit.SlidingWindowCounter), limit.PerMinute(10), limit.Per(10, 2*time.Second),
		limit.PerCalendar(10, limit.Day, ""), limit.PerCalendar(10, limit.Day, "Europe/Paris"), limit.PerCalendar(10, limit.Month, "Europe/Paris"),
	}
	for _, a := range limits {
		p := &policy{lim: a.Canonical()}
		for _, b := range limits {
			assert.Equal(t, a.Canonical() == b.Canonical(), p.is(&b), "%v is %v", a, b)
		}
	}
}

// Estimate is the global state this node knows, without its own spend Redis
// has not acknowledged: untaken spend, and pending (taken, its report not
// acknowledged). Redis adds that spend from the node's reports after it
// restores a lost key from the estimate: left in, it was charged twice, and
// scaled up by the node's share (four times here).
func TestEstimateLeavesOutTheNodesUnacknowledgedSpend(t *testing.T) {
	w := t0 / int64(time.Second)
	tests := []struct {
		alg    limit.Algorithm
		global limit.State // 40 spent of 100
	}{
		{limit.TokenBucket, limit.State{TAT: t0 + 40*int64(10*time.Millisecond)}},
		{limit.FixedWindow, limit.State{Window: w, Count: 40}},
		{limit.SlidingWindowCounter, limit.State{Window: w, Count: 40}},
	}
	for _, tc := range tests {
		t.Run(tc.alg.String(), func(t *testing.T) {
			lim := limit.PerSecond(100).WithAlgorithm(tc.alg)
			e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
			require.NoError(t, e.Seed(t0, "k", lim, tc.global, ShareOf(1, 4), 0, true))
			est, ok := e.Estimate("k", lim, 0, w)
			require.True(t, ok)
			assert.Equal(t, tc.global, est, "nothing spent here yet")

			res, err := e.AllowN(t0, "k", lim, 6)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			est, _ = e.Estimate("k", lim, 0, w)
			assert.Equal(t, tc.global, est, "the untaken spend left out")

			e.TakeSpend(nil) // into a report not yet acknowledged: pending
			est, _ = e.Estimate("k", lim, 6, w)
			assert.Equal(t, tc.global, est, "the pending spend left out")
			est, _ = e.Estimate("k", lim, 0, w)
			assert.NotEqual(t, tc.global, est, "acknowledged, the spend is the global state's")

			_, ok = e.Estimate("other", lim, 0, w)
			assert.False(t, ok)
		})
	}
}
