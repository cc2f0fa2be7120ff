package local

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// peekLimits are every algorithm, and calendar windows of both kinds that
// take them, with small capacities so that sequences reach refusals.
func peekLimits() []limit.Limit {
	return []limit.Limit{
		limit.PerSecond(10).WithBurst(4),
		limit.PerSecond(5).WithBurst(3).WithAlgorithm(limit.LeakyBucket),
		limit.PerSecond(6).WithAlgorithm(limit.FixedWindow),
		limit.PerSecond(6).WithAlgorithm(limit.SlidingWindowLog),
		limit.PerSecond(6).WithAlgorithm(limit.SlidingWindowCounter),
		limit.PerCalendar(6, limit.Day, "Europe/Paris"),
		limit.PerCalendar(6, limit.Month, "").WithAlgorithm(limit.SlidingWindowCounter),
	}
}

// peekConfigs are the engines of the three modes: LocalOnly's, Sync's
// (spend reported, orphans kept) and Async's (Asks mode).
func peekConfigs() map[string]Config {
	return map[string]Config{
		"local": {},
		"sync":  {TrackSpend: true, SpendDue: true, KeepOrphans: true},
		"async": {TrackSpend: true, Asks: true},
	}
}

// step returns how far the clock moves before the next request under lim:
// mostly a small part of its period, sometimes past a window or two.
func peekStep(r *rand.Rand, lim limit.Limit) time.Duration {
	period := lim.Period
	if lim.Calendar != limit.NoCalendar {
		period = lim.Calendar.Nominal()
	}
	switch r.IntN(10) {
	case 0:
		return 0
	case 1:
		return time.Duration(r.Int64N(int64(2 * period)))
	}
	return time.Duration(r.Int64N(int64(period / 8)))
}

// A peek answers what the decision at the same instant answers, field for
// field, on every algorithm, in every mode's engine, degraded or not; the
// log of the calendar windows included.
func TestPeekIsWhatAllowAnswers(t *testing.T) {
	for name, cfg := range peekConfigs() {
		for _, lim := range peekLimits() {
			if cfg.Asks && (lim.Algorithm == limit.SlidingWindowLog || lim.Calendar != limit.NoCalendar) {
				continue // Async mode refuses them before the engine
			}
			t.Run(name+"/"+lim.String(), func(t *testing.T) {
				e := newEngine(t, cfg)
				r := rand.New(rand.NewPCG(7, uint64(lim.Rate)))
				now := t0
				admitted := 0
				for i := range 400 {
					now += int64(peekStep(r, lim))
					key := fmt.Sprintf("k%d", r.IntN(3))
					n := r.Int64N(min(lim.Capacity(), 3) + 1)
					if i == 200 {
						e.SetDegraded(true)
					}
					degraded := r.IntN(8) == 0
					peek, allow := e.PeekN, e.AllowN
					if degraded {
						peek, allow = e.PeekDegraded, e.AllowDegraded
					}
					p, perr := peek(now, key, lim, n)
					d, derr := allow(now, key, lim, n)
					require.Equal(t, derr, perr, "step %d", i)
					if derr == nil {
						require.Equal(t, d, p, "step %d: %s at +%v, n %d", i, key, time.Duration(now-t0), n)
					}
					if d.Allowed && n > 0 {
						admitted++
					}
				}
				assert.Positive(t, admitted, "the sequence admits requests")
			})
		}
	}
}

// op is one step of a twin run.
type peekOp struct {
	at  int64
	key string
	lim limit.Limit
	n   int64
}

// Two engines take the same decisions; one of them is also peeked at
// between them, on keys it holds and keys it does not, under limits the
// key holds and others, at the decisions' instant and ahead of it (a
// window or two later). Every decision, the keys held, the spend the
// reconciler would take and the demand recorded stay the same as the
// twin's that was never peeked at.
func TestPeekChangesNoLaterDecision(t *testing.T) {
	for name, cfg := range peekConfigs() {
		t.Run(name, func(t *testing.T) {
			lims := peekLimits()
			if cfg.Asks {
				lims = slices.DeleteFunc(lims, func(l limit.Limit) bool {
					return l.Algorithm == limit.SlidingWindowLog || l.Calendar != limit.NoCalendar
				})
			}
			// One shard each: a shard's clock (which spend's Since and a
			// degraded spend's Charge are read against) is moved by the
			// keys it holds, and the engines' seeds would share keys out
			// to shards differently.
			cfg.Shards = 1
			a, b := newEngine(t, cfg), newEngine(t, cfg)
			r := rand.New(rand.NewPCG(11, 3))
			now := t0
			var spendA, spendB []Spend
			decided, peeked := 0, 0
			for i := range 3000 {
				lim := lims[r.IntN(len(lims))]
				now += int64(peekStep(r, lim) / 4)
				op := peekOp{at: now, key: fmt.Sprintf("k%d", r.IntN(6)), lim: lim, n: r.Int64N(min(lim.Capacity(), 2) + 1)}
				for range r.IntN(4) {
					plim := lims[r.IntN(len(lims))]
					ahead := time.Duration(0)
					if r.IntN(2) == 0 {
						ahead = peekStep(r, plim) * 4
					}
					_, _ = a.PeekN(now+int64(ahead), fmt.Sprintf("k%d", r.IntN(9)), plim, r.Int64N(2)+1)
					_, _ = a.PeekDegraded(now+int64(ahead), fmt.Sprintf("k%d", r.IntN(9)), plim, 1)
					peeked++
				}
				if i == 1500 {
					a.SetDegraded(true)
					b.SetDegraded(true)
				}
				da, erra := a.AllowN(op.at, op.key, op.lim, op.n)
				db, errb := b.AllowN(op.at, op.key, op.lim, op.n)
				require.Equal(t, errb, erra, "step %d", i)
				require.Equal(t, db, da, "step %d: %+v", i, op)
				require.Equal(t, b.Len(), a.Len(), "step %d: keys held", i)
				decided++
				if i%97 == 0 && cfg.TrackSpend {
					spendA, spendB = a.TakeSpend(spendA[:0]), b.TakeSpend(spendB[:0])
					require.Equal(t, sortedSpend(spendB), sortedSpend(spendA), "step %d: spend taken", i)
				}
			}
			assert.Equal(t, 3000, decided)
			assert.Positive(t, peeked)
		})
	}
}

// sortedSpend orders spend by key and limit.
func sortedSpend(s []Spend) []Spend {
	s = slices.Clone(s)
	slices.SortFunc(s, func(x, y Spend) int {
		if c := strings.Compare(x.Key, y.Key); c != 0 {
			return c
		}
		if c := strings.Compare(x.Limit.String(), y.Limit.String()); c != 0 {
			return c
		}
		return int(x.Window - y.Window)
	})
	return s
}

// Peeking at keys the engine does not hold makes none: a full engine
// evicts nothing, however many new keys are peeked at, and the keys it
// holds answer as before.
func TestPeekAtNewKeysEvictsNothing(t *testing.T) {
	e := newEngine(t, Config{MaxKeys: 64})
	lim := limit.PerMinute(10)
	for i := range 64 {
		_, err := e.AllowN(t0, fmt.Sprintf("held%d", i), lim, 3)
		require.NoError(t, err)
	}
	require.Equal(t, 64, e.Len())
	for i := range 10_000 {
		res, err := e.PeekN(t0, fmt.Sprintf("new%d", i), lim, 1)
		require.NoError(t, err)
		require.Equal(t, int64(9), res.Remaining, "a new key is fresh")
	}
	assert.Equal(t, 64, e.Len())
	assert.Zero(t, e.Evictions())
	for i := range 64 {
		res, err := e.PeekN(t0, fmt.Sprintf("held%d", i), lim, 1)
		require.NoError(t, err)
		assert.Equal(t, int64(6), res.Remaining, "held%d kept its spend", i)
	}
}

// A key evicted spent comes back as spent as its record says: a peek at
// it says what the decision that brings it back will answer, and does not
// bring it back.
func TestPeekAtAnEvictedKeyReadsItsRecord(t *testing.T) {
	for _, lim := range peekLimits() {
		t.Run(lim.String(), func(t *testing.T) {
			e := newEngine(t, Config{MaxKeys: 64, Shards: 1})
			_, err := e.AllowN(t0, "spent", lim, lim.Capacity())
			require.NoError(t, err)
			for i := range 200 { // push it out
				_, err := e.AllowN(t0, fmt.Sprintf("other%d", i), lim, 1)
				require.NoError(t, err)
			}
			require.Positive(t, e.Evictions())
			held := e.Len()
			p, err := e.PeekN(t0+1, "spent", lim, 1)
			require.NoError(t, err)
			assert.Equal(t, held, e.Len(), "the peek brought nothing back")
			assert.False(t, p.Allowed, "the record says it was spent")
			d, err := e.AllowN(t0+1, "spent", lim, 1)
			require.NoError(t, err)
			assert.Equal(t, d, p)
		})
	}
}

// A peek is refused as the decision would be: a bad key, a bad limit, a
// weight beyond the capacity, a sealed engine.
func TestPeekRefusesWhatAllowRefuses(t *testing.T) {
	e := newEngine(t, Config{})
	lim := limit.PerSecond(10).WithBurst(3)
	_, err := e.PeekN(t0, "", lim, 1)
	assert.ErrorIs(t, err, limit.ErrInvalidKey)
	_, err = e.PeekN(t0, "k", limit.PerSecond(0), 1)
	assert.ErrorIs(t, err, limit.ErrInvalidLimit)
	_, err = e.PeekN(t0, "k", lim, 4)
	assert.ErrorIs(t, err, limit.ErrExceedsCapacity)
	_, err = e.PeekN(t0, "k", limit.PerCalendar(3, limit.Day, "Nowhere/Atlantis"), 1)
	assert.Error(t, err)
	e.Seal()
	_, err = e.PeekN(t0, "k", lim, 1)
	assert.ErrorIs(t, err, ErrSealed)
}

// A long sliding log peeked at once most of it has left the window (where
// a decision would compact it) answers as its twin that was never peeked
// at, request for request.
func TestPeekAtALongLogLeavesItWhole(t *testing.T) {
	lim := limit.PerSecond(100).WithAlgorithm(limit.SlidingWindowLog)
	a, b := newEngine(t, Config{}), newEngine(t, Config{})
	ms := int64(time.Millisecond)
	for i := range int64(100) {
		for _, e := range []*Engine{a, b} {
			_, err := e.AllowN(t0+i*5*ms, "k", lim, 1)
			require.NoError(t, err)
		}
	}
	// At +1.3 s the first 61 have left: the peek sees 39.
	p, err := a.PeekN(t0+1300*ms, "k", lim, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(60), p.Remaining)
	for i := range int64(200) {
		now := t0 + 1000*ms + i*3*ms
		da, err := a.AllowN(now, "k", lim, 1)
		require.NoError(t, err)
		db, err := b.AllowN(now, "k", lim, 1)
		require.NoError(t, err)
		require.Equal(t, db, da, "request %d", i)
	}
}
