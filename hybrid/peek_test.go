package hybrid

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// peekLimits are every algorithm and both kinds of calendar window, slow
// enough (an hour, a week) that the microseconds between a peek on Redis and
// the decision after it refill nothing and end no window.
func peekLimits() []Limit {
	return []Limit{
		PerHour(6).WithBurst(4),
		PerHour(6).WithBurst(3).WithAlgorithm(LeakyBucket),
		PerHour(6).WithAlgorithm(FixedWindow),
		PerHour(6).WithAlgorithm(SlidingWindowLog),
		PerHour(6).WithAlgorithm(SlidingWindowCounter),
		PerCalendar(6, Day, "Europe/Paris"),
		PerCalendar(6, Week, "").WithAlgorithm(SlidingWindowCounter),
	}
}

// asyncLimits are the limits Async mode decides.
func asyncLimits() []Limit {
	var out []Limit
	for _, lim := range peekLimits() {
		if asyncSupports(&lim) == nil {
			out = append(out, lim)
		}
	}
	return out
}

// quiet is a Redis limiter's configuration with no round due while a test
// runs (an hour's interval), so that whatever Redis sees comes from the
// calls the test makes.
func quiet(srv *redistest.Server, t *testing.T, mode Mode, prefix string, clk clock.Clock) Config {
	return Config{Redis: srv.Client(t), Mode: mode, Prefix: prefix, SyncInterval: time.Hour, RedisTimeout: 5 * time.Second, Clock: clk}
}

// peekThenAllow peeks and then decides, at the limiter's same instant (its
// clock is manual), and requires the two to be one answer.
func peekThenAllow(t *testing.T, l *Limiter, key string, lim Limit, n int64, msg string) Decision {
	t.Helper()
	p, perr := l.PeekN(bg, key, lim, n)
	d, derr := l.AllowN(bg, key, lim, n)
	require.Equal(t, derr, perr, msg)
	require.Equal(t, d, p, msg)
	return d
}

// In memory (LocalOnly, Async on a node that holds its keys whole, and
// any mode while degraded), a peek is the decision at the same instant,
// field for field, on every algorithm the mode runs.
func TestPeekIsWhatAllowAnswersInMemory(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []Mode{LocalOnly, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := clock.NewManual(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			cfg := quiet(srv, t, mode, "mem:"+mode.String()+":", clk)
			lims := peekLimits()
			if mode == Async {
				lims = asyncLimits()
			} else {
				cfg.Redis = nil
			}
			l := newLimiter(t, cfg)
			r := rand.New(rand.NewPCG(5, 8))
			refused := 0
			for i := range 600 {
				lim := lims[r.IntN(len(lims))]
				clk.Advance(time.Duration(r.Int64N(int64(10 * time.Minute))))
				key := fmt.Sprintf("k%d", r.IntN(3))
				d := peekThenAllow(t, l, key, lim, r.Int64N(3), fmt.Sprintf("step %d: %s under %v", i, key, lim))
				require.Equal(t, Local, d.Source)
				if !d.Allowed {
					refused++
				}
			}
			assert.Positive(t, refused)
		})
	}
}

// Sync mode: a peek reads Redis and says what the decision after it
// decides, on every algorithm; the waits it gives are at the decision as
// long, or shorter by at most the time between the two calls.
func TestPeekIsWhatAllowAnswersInSync(t *testing.T) {
	srv := redistest.Start(t)
	l := newLimiter(t, quiet(srv, t, Sync, "sync:", nil))
	r := rand.New(rand.NewPCG(6, 1))
	for _, lim := range peekLimits() {
		refused := 0
		for i := range 30 {
			key := fmt.Sprintf("%v:%d", lim.Algorithm, r.IntN(2))
			n := r.Int64N(3)
			start := time.Now()
			p, err := l.PeekN(bg, key, lim, n)
			require.NoError(t, err)
			d, err := l.AllowN(bg, key, lim, n)
			require.NoError(t, err)
			apart := time.Since(start)
			msg := fmt.Sprintf("%v step %d: %s n %d", lim, i, key, n)
			require.Equal(t, Remote, p.Source, msg)
			require.Equal(t, d.Source, p.Source, msg)
			require.Equal(t, d.Allowed, p.Allowed, msg)
			require.Equal(t, d.Remaining, p.Remaining, msg)
			require.Equal(t, d.Limit, p.Limit, msg)
			for _, w := range [][2]time.Duration{{p.RetryAfter, d.RetryAfter}, {p.ResetAfter, d.ResetAfter}} {
				require.LessOrEqual(t, w[1], w[0], msg)
				require.GreaterOrEqual(t, w[1], w[0]-apart, msg)
			}
			if !d.Allowed {
				refused++
			}
		}
		assert.Positive(t, refused, "%v reaches refusals", lim)
	}
}

// Two limiters take the same decisions; one of them is also peeked at,
// on keys it has decided and others, under limits the key holds and
// others, between every two decisions. Every decision stays the twin's:
// LocalOnly on manual clocks field for field; Async on manual clocks too,
// its waits as far apart as the twins' clocks mapped onto Redis's; Sync on
// Redis (each twin its own prefix), admitted and remaining alike.
func TestPeekChangesNoLaterDecision(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []Mode{LocalOnly, Async, Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			ca, cb := clock.NewManual(start), clock.NewManual(start)
			cfgA := quiet(srv, t, mode, "twin:a:"+mode.String()+":", ca)
			cfgB := quiet(srv, t, mode, "twin:b:"+mode.String()+":", cb)
			lims := peekLimits()
			switch mode {
			case LocalOnly:
				cfgA.Redis, cfgB.Redis = nil, nil
			case Async:
				lims = asyncLimits()
			}
			a, b := newLimiter(t, cfgA), newLimiter(t, cfgB)
			r := rand.New(rand.NewPCG(9, uint64(mode)))
			steps := 400
			if mode == Sync {
				steps = 150 // round trips on a loaded machine
			}
			for i := range steps {
				lim := lims[r.IntN(len(lims))]
				step := time.Duration(r.Int64N(int64(5 * time.Minute)))
				ca.Advance(step)
				cb.Advance(step)
				for range r.IntN(3) {
					_, err := a.PeekN(bg, fmt.Sprintf("k%d", r.IntN(6)), lims[r.IntN(len(lims))], r.Int64N(3))
					require.NoError(t, err)
				}
				key, n := fmt.Sprintf("k%d", r.IntN(3)), r.Int64N(3)
				da, err := a.AllowN(bg, key, lim, n)
				require.NoError(t, err)
				db, err := b.AllowN(bg, key, lim, n)
				require.NoError(t, err)
				msg := fmt.Sprintf("step %d: %s n %d under %v", i, key, n, lim)
				switch mode {
				case LocalOnly:
					require.Equal(t, db, da, msg)
				case Async:
					// Each twin maps its clock onto Redis's by its own round
					// trips: their instants differ by the two offsets.
					skew := (a.Stats().ClockOffset - b.Stats().ClockOffset).Abs()
					require.Equal(t, db.Source, da.Source, msg)
					require.InDelta(t, db.RetryAfter, da.RetryAfter, float64(skew), msg)
					require.InDelta(t, db.ResetAfter, da.ResetAfter, float64(skew), msg)
					require.Equal(t, db.Allowed, da.Allowed, msg)
					// The sliding window counter weighs the previous window
					// by the part of it still in view, rounded up: instants
					// apart by the skew may round one request apart.
					if lim.Algorithm == SlidingWindowCounter && skew > 0 {
						require.InDelta(t, db.Remaining, da.Remaining, 1, msg)
					} else {
						require.Equal(t, db.Remaining, da.Remaining, msg)
					}
				case Sync:
					require.Equal(t, db.Allowed, da.Allowed, msg)
					require.Equal(t, db.Remaining, da.Remaining, msg)
				}
			}
			assert.Equal(t, b.Stats().Keys, a.Stats().Keys, "keys held")
		})
	}
}

// A peek writes nothing to Redis, in Sync and in Async: Redis's count of
// changes and every key stay as they were across peeks of every algorithm
// the mode runs, on keys spent, fresh and full.
func TestPeekWritesNothingToRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	for _, mode := range []Mode{Sync, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			l := newLimiter(t, quiet(srv, t, mode, "ro:"+mode.String()+":", nil))
			lims := peekLimits()
			if mode == Async {
				lims = asyncLimits()
			}
			for _, lim := range lims {
				_, err := l.AllowN(bg, "full", lim, lim.Capacity())
				require.NoError(t, err)
				_, err = l.AllowN(bg, "some", lim, 1)
				require.NoError(t, err)
			}
			before, keys := redistest.Writes(t, c), redistest.Dump(t, c)
			peeks := 0
			for range 3 {
				for _, lim := range lims {
					for _, key := range []string{"full", "some", "fresh"} {
						for n := range int64(3) {
							_, err := l.PeekN(bg, key, lim, n)
							require.NoError(t, err)
							peeks++
						}
					}
				}
			}
			assert.Equal(t, before, redistest.Writes(t, c), "changes counted by Redis across %d peeks", peeks)
			assert.Equal(t, keys, redistest.Dump(t, c))
		})
	}
}

// A Sync peek is not counted by the breaker, whatever Redis does: peeks
// on a healthy Redis leave its counts as they were, peeks on a dead one do
// not open it, and once decisions have opened it a peek answers from
// memory under the fallback, as the decision does, without a call.
func TestSyncPeekLeavesTheBreakerAlone(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := Config{Redis: client(t, srv), Mode: Sync, SyncInterval: time.Hour, FleetSize: 2, BreakerOpenFor: time.Hour, Clock: clk,
		RedisTimeout: 5 * time.Second} // a loaded machine does not send a healthy peek to the fallback
	l := newLimiter(t, cfg)
	lim := PerHour(10)
	_, err := l.Allow(bg, "k", lim)
	require.NoError(t, err)
	counts := l.Stats().BreakerCounts
	for range 20 {
		d, err := l.Peek(bg, "k", lim)
		require.NoError(t, err)
		require.Equal(t, Remote, d.Source)
	}
	assert.Equal(t, counts, l.Stats().BreakerCounts, "healthy: nothing counted")

	srv.Kill()
	// A few: past the client pool's size in failed dials, go-redis keeps
	// redialling on a goroutine of its own after the test.
	for range 5 {
		d, err := l.Peek(bg, "k", lim)
		require.NoError(t, err)
		assert.Equal(t, Degraded, d.Source, "Redis is gone: from memory")
	}
	assert.Equal(t, breaker.Closed, l.Stats().Breaker, "peeks open nothing")
	assert.Equal(t, counts, l.Stats().BreakerCounts)

	for l.Stats().Breaker != breaker.Open {
		_, err := l.Allow(bg, "other", lim)
		require.NoError(t, err)
	}
	calls := l.Stats().DecisionCalls
	for i := range 10 {
		d := peekThenAllow(t, l, "k", lim, 1, fmt.Sprintf("open breaker, request %d", i))
		require.Equal(t, Degraded, d.Source)
	}
	assert.Equal(t, calls.Closed, l.Stats().DecisionCalls.Closed)
}

// Async on a node that holds part of a key: a peek the node's share can
// answer is the decision; one it cannot says the fleet would decide
// (Source Remote, no retry-after), and asks nothing of Redis.
func TestAsyncPeekSaysWhenTheFleetWouldDecide(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	cfg := quiet(srv, t, Async, "fleet:", nil) // the real clock: asking the fleet waits on it
	cfg.FleetSize = 2
	l := newLimiter(t, cfg)
	lim := PerHour(100)
	p, err := l.PeekN(bg, "k", lim, 40)
	require.NoError(t, err)
	assert.True(t, p.Allowed)
	assert.Equal(t, Local, p.Source, "within the node's share of 50")
	d, err := l.AllowN(bg, "k", lim, 40)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, p.Remaining, d.Remaining)
	before := redistest.Writes(t, c)
	p, err = l.PeekN(bg, "k", lim, 20)
	require.NoError(t, err)
	assert.False(t, p.Allowed)
	assert.Equal(t, Remote, p.Source, "beyond the node's share: the fleet would decide")
	assert.Zero(t, p.RetryAfter)
	assert.Equal(t, int64(10), p.Remaining, "the node's own allowance")
	assert.Equal(t, before, redistest.Writes(t, c), "nothing asked of Redis")
	d, err = l.AllowN(bg, "k", lim, 20)
	require.NoError(t, err)
	assert.Equal(t, Remote, d.Source, "the decision was the fleet's: %+v", d)
}

// Peek refuses what Allow refuses: the caller's mistakes, a limit the mode
// cannot run, a closed limiter.
func TestPeekRefusesWhatAllowRefuses(t *testing.T) {
	srv := redistest.Start(t)
	l := newLimiter(t, quiet(srv, t, Async, "refuse:", nil))
	_, err := l.Peek(bg, "", PerSecond(1))
	assert.ErrorIs(t, err, ErrInvalidKey)
	_, err = l.PeekN(bg, "k", PerSecond(10).WithBurst(3), 4)
	assert.ErrorIs(t, err, ErrExceedsCapacity)
	_, err = l.Peek(bg, "k", PerHour(6).WithAlgorithm(SlidingWindowLog))
	assert.ErrorIs(t, err, ErrUnsupported)
	_, err = l.Peek(bg, "k", PerCalendar(6, Day, ""))
	assert.ErrorIs(t, err, ErrUnsupported)
	require.NoError(t, l.Close(bg))
	_, err = l.Peek(bg, "k", PerSecond(1))
	assert.ErrorIs(t, err, ErrClosed)
}
