package local

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// The traffic shapes that once broke the engine's bounds, each as a test.

func TestMaxKeysBoundsTheEngineNotEachShard(t *testing.T) {
	for _, maxKeys := range []int{300, 1000, 4096} {
		t.Run(fmt.Sprint(maxKeys), func(t *testing.T) {
			e := newEngine(t, Config{MaxKeys: maxKeys})
			lim := limit.PerHour(1)
			for i := range maxKeys {
				_, err := e.AllowN(t0, fmt.Sprintf("k%d", i), lim, 1)
				require.NoError(t, err)
			}
			assert.Equal(t, maxKeys, e.Len(), "every key up to MaxKeys is held")
			assert.Zero(t, e.Evictions(), "none evicted within the bound")
			// Every key is still there, spent: none was evicted early.
			for i := range maxKeys {
				res, _ := e.AllowN(t0, fmt.Sprintf("k%d", i), lim, 1)
				require.False(t, res.Allowed, "k%d was forgotten and came back full", i)
			}
			for i := range maxKeys {
				_, _ = e.AllowN(t0, fmt.Sprintf("more%d", i), lim, 1)
			}
			assert.LessOrEqual(t, e.Len(), maxKeys+len(e.shards), "bounded")
			// Each new key beyond the bound evicted one, give or take the
			// few a shard holding none took without evicting.
			assert.InDelta(t, maxKeys, float64(e.Evictions()), float64(len(e.shards)), "evictions counted")
		})
	}
}

func TestAnEvictedKeyDoesNotComeBackFull(t *testing.T) {
	// A 1/hour key is spent, evicted by a crowd of others, then asked again:
	// without a memory of evicted keys it would pass again. The crowd
	// evicted within the hour fits the memory (MaxKeys of them).
	//
	// The victim is asked in the first round and the last only. Asked in
	// every round, as it was, it kept its place (a key used since the queue
	// last passed it gets a second chance, keys.go) and 100 others a round
	// never evicted it: the test asked a key always held. Unused, it is the
	// first key its shard evicts, once the engine is full (in round 2).
	limits := []limit.Limit{
		limit.PerHour(1),
		limit.PerHour(1).WithAlgorithm(limit.LeakyBucket),
		limit.PerHour(1).WithAlgorithm(limit.FixedWindow),
		limit.PerHour(1).WithAlgorithm(limit.SlidingWindowCounter),
		limit.PerHour(1).WithAlgorithm(limit.SlidingWindowLog),
	}
	for _, lim := range limits {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			e := newEngine(t, Config{MaxKeys: 256})
			sh := e.shardOf(e.hash("victim"))
			admitted := 0
			for round := range 5 {
				now := at(time.Duration(round) * time.Second)
				if round == 4 {
					_, held := sh.keys.Peek("victim")
					require.False(t, held, "400 others evicted the victim")
				}
				if round == 0 || round == 4 {
					if res, _ := e.AllowN(now, "victim", lim, 1); res.Allowed {
						admitted++
					}
				}
				for i := range 100 { // push the victim out
					_, _ = e.AllowN(now, fmt.Sprintf("crowd-%d-%d", round, i), lim, 1)
				}
			}
			assert.Equal(t, 1, admitted, "one per hour, evictions or not")
			assert.LessOrEqual(t, e.EvictionsForgotten(), uint64(5), "of the 246 evicted, at most a few forgotten")
		})
	}
}

// More keys evicted spent within their refill time than the memory of
// evictions holds: the records that turn fresh first are forgotten, and
// counted. (A key returning then may find more than it had left; MaxKeys
// should cover the keys active within a limit's refill time.)
func TestForgottenEvictionsAreCounted(t *testing.T) {
	e := newEngine(t, Config{MaxKeys: 64})
	lim := limit.PerHour(1)
	for i := range 1000 {
		_, _ = e.AllowN(at(time.Duration(i)*time.Millisecond), fmt.Sprintf("k%d", i), lim, 1)
	}
	assert.Positive(t, e.EvictionsForgotten())
	res, _ := e.AllowN(at(time.Second), "k999", lim, 1)
	assert.False(t, res.Allowed, "the latest are remembered")
}

// A flood of new keys, each spent a little and evicted, never makes a new
// client start spent: records are per key, not shared by a hash's cells.
// Before: a count-min sketch of MaxKeys/4 cells; a flood of 20,000 spent
// keys through MaxKeys 1,000 made every cell spent, and new keys started
// spent (most of the 100 refused their first burst).
func TestAFloodOfNewKeysNeverMakesNewKeysStartSpent(t *testing.T) {
	e := newEngine(t, Config{MaxKeys: 1000})
	lim := limit.PerHour(10)
	for i := range 20_000 {
		_, _ = e.AllowN(t0, fmt.Sprintf("flood-%d", i), lim, 5)
	}
	fresh := 0
	for i := range 100 {
		if res, _ := e.AllowN(t0, fmt.Sprintf("new-%d", i), lim, 10); res.Allowed {
			fresh++
		}
	}
	assert.Equal(t, 100, fresh, "every new key starts with its whole burst")
}

func TestRemainingIsWhatThisNodeWillAdmit(t *testing.T) {
	// Under a third of the limit, Remaining counts this node's allowance, not
	// the fleet's: each request it announces is admitted.
	for _, lim := range []limit.Limit{
		limit.PerSecond(30),
		limit.PerSecond(30).WithAlgorithm(limit.FixedWindow),
		limit.PerSecond(30).WithAlgorithm(limit.SlidingWindowCounter),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
			require.NoError(t, e.Seed(t0, "k", lim, limit.State{Window: t0 / int64(time.Second)}, ShareAmong(3), 0, true))
			res, err := e.AllowN(t0, "k", lim, 0)
			require.NoError(t, err)
			announced := res.Remaining
			admitted := int64(0)
			for range 30 {
				if res, _ := e.AllowN(t0, "k", lim, 1); res.Allowed {
					admitted++
				}
			}
			assert.Equal(t, announced, admitted)
			assert.Equal(t, int64(10), admitted)
		})
	}
}

func TestReportDueAtHalfTheShareOrOnPressure(t *testing.T) {
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true, SpendDue: true})
	e.SetFleet(0, 4)
	lim := limit.PerSecond(100) // a quarter share: 25 of the burst, due at 12
	for range 11 {
		_, _ = e.AllowN(t0, "quiet", lim, 1)
	}
	assert.Empty(t, e.TakeDue(t0, nil), "below the threshold the node decides alone")
	_, _ = e.AllowN(t0, "quiet", lim, 1)
	due := e.TakeDue(t0, nil)
	require.Len(t, due, 1)
	assert.Equal(t, int64(12), due[0].Spent)
	assert.False(t, due[0].Pressure)

	for range 30 {
		_, _ = e.AllowN(t0, "busy", lim, 1)
	}
	due = e.TakeDue(t0, nil)
	require.Len(t, due, 1)
	assert.True(t, due[0].Pressure, "denied: the node wants more")
	assert.Equal(t, int64(25), due[0].Spent)
	assert.Equal(t, int64(30), due[0].Hits)

	// What was never due is still there for a final flush.
	_, _ = e.AllowN(t0, "quiet", lim, 3)
	all := e.TakeSpend(nil)
	require.Len(t, all, 1)
	assert.Equal(t, int64(3), all[0].Spent)
}

func TestEvictionKeepsSpendOfEveryLimit(t *testing.T) {
	e := newEngine(t, Config{Shards: 1, MaxKeys: 2, TrackSpend: true, KeepOrphans: true})
	a, b := limit.PerSecond(100), limit.PerMinute(1000)
	_, _ = e.AllowN(t0, "x", a, 2)
	_, _ = e.AllowN(t0, "x", b, 3)
	for i := range 5 {
		_, _ = e.AllowN(t0, fmt.Sprintf("other%d", i), a, 1)
	}
	got := map[limit.Limit]int64{}
	for _, s := range e.TakeSpend(nil) {
		if s.Key == "x" {
			got[s.Limit] += s.Spent
		}
	}
	assert.Equal(t, map[limit.Limit]int64{a: 2, b: 3}, got)
}

func TestWithoutSpendDueOnlyPressureIsDue(t *testing.T) {
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
	e.SetFleet(0, 4)
	lim := limit.PerSecond(100)
	for range 25 {
		_, _ = e.AllowN(t0, "k", lim, 1)
	}
	assert.Empty(t, e.TakeDue(t0, nil), "a quarter spent: decided alone, nothing to tell")
	_, _ = e.AllowN(t0, "k", lim, 1)
	due := e.TakeDue(t0, nil)
	require.Len(t, due, 1)
	assert.True(t, due[0].Pressure)
}

// TestGrowJoinsThePoolsState: growing a share takes the pool's state with
// it: the room gained is only what the pool had unspent.
func TestGrowJoinsThePoolsState(t *testing.T) {
	for _, lim := range []limit.Limit{
		limit.PerSecond(100),
		limit.PerSecond(100).WithAlgorithm(limit.FixedWindow),
		limit.PerSecond(100).WithAlgorithm(limit.SlidingWindowCounter),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
			e.SetFleet(0, 4)
			w := t0 / int64(time.Second)
			assert.False(t, e.Contest(t0, "k", lim, true, ShareAmong(4), false), "not held yet")
			_, _ = e.AllowN(t0, "k", lim, 0)
			require.True(t, e.Contest(t0, "k", lim, true, ShareAmong(4), false))
			for range 10 { // 10 of this quarter's 25
				res, err := e.AllowN(t0, "k", lim, 1)
				require.NoError(t, err)
				require.True(t, res.Allowed)
			}
			// A quarter more, from a pool half spent (50 of 100 in the estimate).
			pool := limit.State{TAT: t0 + 50*int64(10*time.Millisecond), Window: w, Count: 50}
			require.True(t, e.Grow(t0, "k", lim, ShareAmong(4), pool))
			res, _ := e.AllowN(t0, "k", lim, 0)
			assert.Equal(t, int64(15+12), res.Remaining, "15 left of its own quarter, 12 of the pool's half-spent quarter")
		})
	}
}
