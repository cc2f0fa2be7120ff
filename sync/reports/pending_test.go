package reports

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/sync/round"
)

// The spend waiting for Redis is bounded in bytes: a counter that would pass
// MaxPendingBytes is not made, its weight is dropped, counted and logged
// once; a counter forgotten gives its bytes back.
func TestCountersBoundedInBytes(t *testing.T) {
	lim := limit.PerSecond(10)
	k := func(i int) spendKey { return spendKey{key: fmt.Sprintf("key%05d", i), lim: lim} }
	cs := newCounters(1<<20, 3*counterBytes(k(0)))
	now := time.Unix(1_800_000_000, 0)
	for i := range 3 {
		assert.Zero(t, cs.add(local.Spend{Key: k(i).key, Limit: lim, Spent: 2}, now))
	}
	assert.Equal(t, int64(5), cs.add(local.Spend{Key: k(3).key, Limit: lim, Spent: 5}, now), "a fourth does not fit in the bytes")
	assert.Equal(t, uint64(1), cs.bytesFull)
	assert.Equal(t, int64(5), cs.bytesLost)
	assert.Equal(t, 3*counterBytes(k(0)), cs.bytes)
	cs.remove(k(0))
	assert.Zero(t, cs.add(local.Spend{Key: k(3).key, Limit: lim, Spent: 5}, now), "room again")
}

// counterBytes is at least what a counter takes on the heap.
func TestCounterBytesCoverTheHeap(t *testing.T) {
	const n = 100_000
	lim := limit.PerSecond(10)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%011d", i) // 16 bytes
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cs := newCounters(1<<30, 0)
	now := time.Unix(1_800_000_000, 0)
	for _, k := range keys {
		cs.get(spendKey{key: k, lim: lim}, now)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := int64(after.HeapAlloc-before.HeapAlloc) / n
	runtime.KeepAlive(cs)
	t.Logf("a counter takes %d bytes on the heap (key of 16 bytes, counted apart); counterBytes says %d", per, counterBytes(spendKey{key: keys[0]}))
	assert.LessOrEqual(t, per, counterBytes(spendKey{key: keys[0]}))
}

// A Sync node holding spend on many keys past an outage reports them at
// MaxReports keys a round, every round, until none wait: with the defaults
// (8,000 keys a round, a round every 20 ms) 400,000 keys/s while a round
// takes no longer than its interval. Counted, not timed.
func TestDrainReportsMaxReportsKeysARound(t *testing.T) {
	const keys, per = 6000, 1000
	var rounds []round.Info
	f := newFixture(t, Config{MaxReports: per, BatchSize: 500, OnRound: func(i round.Info) { rounds = append(rounds, i) }})
	warmUp(t, f)
	f.engine.SetDegraded(true) // an outage: spend waits in memory
	lim := limit.Per(100, time.Hour)
	for i := range keys {
		res, err := f.engine.AllowDegraded(time.Now().UnixNano(), fmt.Sprint("k", i), lim, 60)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	f.engine.SetDegraded(false)
	rounds = nil
	for range keys/per + 2 {
		require.NoError(t, f.r.Round(bg))
	}
	var sent []int
	for _, r := range rounds {
		sent = append(sent, r.Keys)
	}
	t.Logf("keys reported per round: %v; deferred: %v", sent, func() (d []int) {
		for _, r := range rounds {
			d = append(d, r.Deferred)
		}
		return d
	}())
	for i := range keys / per {
		assert.Equal(t, per, rounds[i].Keys, "round %d reports MaxReports keys", i)
		assert.Equal(t, keys-(i+1)*per, rounds[i].Deferred, "round %d defers the rest", i)
	}
	assert.Zero(t, f.r.Stats().Pending, "all drained")
	assert.Zero(t, f.r.Stats().LostSpend)
}

// MaxPendingBytes through a Sync round: the keys beyond it lose their
// spend, counted in PendingDropped and LostSpend, and logged once however
// many rounds hit it.
func TestPendingBytesBoundCountsAndLogsOnce(t *testing.T) {
	lim := limit.Per(100, time.Hour)
	f := newFixture(t, Config{MaxPendingBytes: 40 * counterBytes(spendKey{key: "k00"})})
	f.engine.SetDegraded(true)
	for i := range 100 {
		_, err := f.engine.AllowDegraded(time.Now().UnixNano(), fmt.Sprintf("k%02d", i), lim, 60)
		require.NoError(t, err)
	}
	_ = f.r.Round(bg)
	for i := range 100 {
		_, err := f.engine.AllowDegraded(time.Now().UnixNano(), fmt.Sprintf("x%02d", i), lim, 60)
		require.NoError(t, err)
	}
	_ = f.r.Round(bg)
	st := f.r.Stats()
	t.Logf("stats %+v", st)
	assert.Positive(t, st.PendingDropped)
	assert.Equal(t, st.PendingDropped, st.LostSpend)
	assert.LessOrEqual(t, st.PendingBytes, uint64(40*counterBytes(spendKey{key: "k00"})))
	assert.Equal(t, 1, strings.Count(f.logs.String(), "MaxPendingBytes"), "logged once:\n%s", f.logs)
}

// topPicks keeps what sorting all and keeping k would.
func TestTopPicksIsTheSortedPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 5, 100, 1000} {
		for _, k := range []int{0, 1, 3, 50, 100, 2000} {
			all := make([]pick, n)
			for i := range all {
				all[i] = pick{c: &counter{epoch: int64(i)}, prio: rng.IntN(4)}
			}
			rng.Shuffle(n, func(i, j int) { all[i], all[j] = all[j], all[i] })
			want := slices.Clone(all)
			sortPicks(want)
			want = want[:min(k, n)]
			got := topPicks(slices.Clone(all), k)
			require.Equal(t, len(want), len(got), "n %d k %d", n, k)
			for i := range want {
				require.Same(t, want[i].c, got[i].c, "n %d k %d at %d", n, k, i)
			}
		}
	}
}

// BenchmarkSelectPicks: a round's choice of the MaxReports (8,000) most
// pressing of a million counters with spend waiting after an outage.
func BenchmarkSelectPicks(b *testing.B) {
	const n, k = 1 << 20, 8000
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]pick, n)
	for i := range src {
		src[i] = pick{c: &counter{epoch: int64(i)}, prio: prioSpend}
	}
	rng.Shuffle(n, func(i, j int) { src[i], src[j] = src[j], src[i] })
	p := make([]pick, n)
	b.Run("sort", func(b *testing.B) {
		for b.Loop() {
			copy(p, src)
			sortPicks(p)
			_ = p[:k]
		}
	})
	b.Run("top", func(b *testing.B) {
		for b.Loop() {
			copy(p, src)
			_ = topPicks(p, k)
		}
	})
}

// BenchmarkBuildAfterOutage: the part of a Sync round that chooses and
// builds its reports, with a million keys of spend waiting after an outage
// (every counter due) and the default MaxReports (8,000). Reported as the
// keys a second that rounds of this cost alone could drain.
func BenchmarkBuildAfterOutage(b *testing.B) {
	const n = 1 << 20
	e, err := local.New(local.Config{TrackSpend: true, KeepOrphans: true, SpendDue: true})
	require.NoError(b, err)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never called: build makes no call
	defer c.Close()
	s, err := remote.New(c, remote.Options{Node: "bench"})
	require.NoError(b, err)
	r, err := New(Config{}, Deps{Engine: e, Store: s, Breaker: breaker.New(breaker.Settings{}), Clock: clock.Real{}, Offset: clock.NewOffset(time.Now())})
	require.NoError(b, err)
	lim := limit.Per(100, time.Hour)
	now := time.Now()
	for i := range n {
		r.counters.add(local.Spend{Key: fmt.Sprintf("user:%011d", i), Limit: lim, Spent: 60, Charge: 60, Due: true}, now)
	}
	rnow := now.UnixNano()
	b.ResetTimer()
	for b.Loop() {
		r.mu.Lock()
		r.build(rnow, false)
		for _, s := range r.sent {
			s.c.due = true // due again: every round finds a million waiting
		}
		r.mu.Unlock()
	}
	b.ReportMetric(float64(r.cfg.MaxReports)/(b.Elapsed().Seconds()/float64(b.N)), "keys/s")
}

// BenchmarkDrainAfterOutage: a Sync node with 200,000 keys of spend made
// while Redis was out of reach reports them all to a private redis-server,
// round after round, back to back (default MaxReports and batches);
// reported as keys drained a second, and rounds.
func BenchmarkDrainAfterOutage(b *testing.B) {
	const n = 200_000
	lim := limit.Per(100, time.Hour)
	for b.Loop() {
		b.StopTimer()
		f := newFixture(b, Config{})
		warmUp(b, f)
		f.engine.SetDegraded(true)
		for i := range n {
			if _, err := f.engine.AllowDegraded(time.Now().UnixNano(), fmt.Sprintf("user:%011d", i), lim, 60); err != nil {
				b.Fatal(err)
			}
		}
		f.engine.SetDegraded(false)
		b.StartTimer()
		began, rounds := time.Now(), 0
		for sent := uint64(0); ; rounds++ {
			if err := f.r.Round(bg); err != nil {
				b.Fatal(err)
			}
			st := f.r.Stats()
			if st.Pending == 0 && st.KeysSent == sent {
				break
			}
			sent = st.KeysSent
		}
		took := time.Since(began)
		b.ReportMetric(n/took.Seconds(), "keys/s")
		b.ReportMetric(float64(rounds), "rounds")
	}
}
