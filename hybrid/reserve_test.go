package hybrid

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/rateparity"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// memorySubject plays a parity sequence through a limiter that decides in
// memory (LocalOnly, Async, degraded) on a manual clock.
type memorySubject struct {
	l     *Limiter
	key   string
	clk   *clock.Manual
	lim   Limit
	queue bool
	src   Source // the Source every decision must have
}

func (s *memorySubject) Advance(d time.Duration) { s.clk.Advance(d) }

func (s *memorySubject) Allow(n int) (rateparity.Outcome, error) {
	at := s.l.now()
	d, err := s.l.AllowN(bg, s.key, s.lim, int64(n))
	if err == nil && d.Source != s.src {
		err = fmt.Errorf("source %v, want %v", d.Source, s.src)
	}
	return s.outcome(d.Allowed, 0, d.Remaining, at), err
}

func (s *memorySubject) Reserve(n int) (rateparity.Outcome, func() (time.Time, error), error) {
	r, err := s.l.ReserveN(bg, s.key, s.lim, int64(n))
	if err != nil {
		return rateparity.Outcome{}, nil, err
	}
	if r.Source != s.src {
		return rateparity.Outcome{}, nil, fmt.Errorf("source %v, want %v", r.Source, s.src)
	}
	cancel := func() (time.Time, error) {
		at := s.l.now()
		return time.Unix(0, at), r.Cancel(bg)
	}
	return s.outcome(r.OK(), r.delay, r.Remaining, r.at), cancel, nil
}

func (s *memorySubject) outcome(ok bool, delay time.Duration, remaining, at int64) rateparity.Outcome {
	if s.queue {
		remaining = -1
	}
	return rateparity.Outcome{OK: ok, Delay: delay, Remaining: remaining, At: time.Unix(0, at)}
}

// syncSubject plays a parity sequence in Redis, on Redis server TIME, which
// it reads from each script's answer; it cannot move that clock.
type syncSubject struct {
	l     *Limiter
	lim   Limit
	queue bool
}

func (s *syncSubject) Advance(time.Duration) {}

func (s *syncSubject) Allow(n int) (rateparity.Outcome, error) {
	// The script Sync mode's AllowN runs, called directly for its TIME.
	d, err := s.l.store.AllowN(bg, "k", s.lim, int64(n))
	return s.outcome(d.Allowed, 0, d.Remaining, d.Now), err
}

func (s *syncSubject) Reserve(n int) (rateparity.Outcome, func() (time.Time, error), error) {
	r, err := s.l.ReserveN(bg, "k", s.lim, int64(n))
	if err != nil {
		return rateparity.Outcome{}, nil, err
	}
	if r.Source != Remote {
		return rateparity.Outcome{}, nil, fmt.Errorf("source %v, want remote", r.Source)
	}
	cancel := func() (time.Time, error) {
		// What Reservation.Cancel runs, called directly for its TIME.
		_, d, err := s.l.store.CancelN(bg, "k", s.lim, int64(n), r.at+int64(r.delay))
		return time.Unix(0, d.Now), err
	}
	return s.outcome(r.OK(), r.delay, r.Remaining, r.at), cancel, nil
}

func (s *syncSubject) outcome(ok bool, delay time.Duration, remaining, at int64) rateparity.Outcome {
	if s.queue {
		remaining = -1
	}
	return rateparity.Outcome{OK: ok, Delay: delay, Remaining: remaining, At: time.Unix(0, at)}
}

// quietLog drops what a test provokes on purpose.
var quietLog = slog.New(slog.DiscardHandler)

// deadRedis returns a client of a Redis that has died, for limiters that
// start degraded and stay so.
func deadRedis(t *testing.T) Config {
	srv := redistest.Start(t)
	c := client(t, srv)
	srv.Kill()
	return Config{Redis: c, StartDegraded: true, FleetSize: 1, SyncInterval: time.Hour, BreakerOpenFor: time.Hour,
		StartupTimeout: 300 * time.Millisecond, Logger: quietLog}
}

// parityCase is one bucket compared with x/time/rate.
type parityCase struct {
	name  string
	lim   Limit
	ref   func() *rate.Limiter
	opts  rateparity.Options
	queue bool
}

// memoryCases run on a manual clock, at 8 per second on a 1/64 s grid, so
// that x/time/rate's floats are exact.
var memoryCases = []parityCase{
	{"token", PerSecond(8).WithBurst(4), func() *rate.Limiter { return rate.NewLimiter(8, 4) },
		rateparity.Options{Steps: 200, MaxN: 4, Grid: time.Second / 64, MaxWait: 24}, false},
	{"leaky", PerSecond(8).WithBurst(1000).WithAlgorithm(LeakyBucket), func() *rate.Limiter { return rate.NewLimiter(8, 1) },
		rateparity.Options{Steps: 200, MaxN: 1, Grid: time.Second / 64, MaxWait: 12}, true},
}

// Reserve, Cancel and Allow answer as x/time/rate's do, step for step, in
// every mode that decides in memory: LocalOnly, Async, and degraded (from
// Async and from Sync). Async and degraded refuse a wait longer than one
// burst tolerance; their sequences stay within it.
func TestReserveParityInMemory(t *testing.T) {
	srv := redistest.Start(t)
	modes := []struct {
		name    string
		cfg     func(t *testing.T, clk *clock.Manual) Config
		src     Source
		maxDebt bool
	}{
		{"local", func(_ *testing.T, clk *clock.Manual) Config { return Config{Clock: clk} }, Local, false},
		{"async", func(t *testing.T, clk *clock.Manual) Config {
			// A prefix per limiter: one node alone on its keys and fleet.
			return Config{Redis: srv.Client(t), Prefix: "parity:" + t.Name() + ":", SyncInterval: time.Hour, Clock: clk}
		}, Local, true},
		{"async degraded", func(t *testing.T, clk *clock.Manual) Config {
			cfg := deadRedis(t)
			cfg.Clock = clk
			return cfg
		}, Degraded, true},
		{"sync degraded", func(t *testing.T, clk *clock.Manual) Config {
			cfg := deadRedis(t)
			cfg.Mode, cfg.Clock = Sync, clk
			return cfg
		}, Degraded, true},
	}
	for _, m := range modes {
		for _, c := range memoryCases {
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				clk := clock.NewManual(time.Unix(1_800_000_000, 0))
				l := newLimiter(t, m.cfg(t, clk))
				for seed := range uint64(5) {
					ops := rateparity.Ops(seed, c.opts)
					sub := &memorySubject{l: l, key: fmt.Sprint("k", seed), clk: clk, lim: c.lim, queue: c.queue, src: m.src}
					bad, err := rateparity.Run(ops, c.ref(), sub, m.maxDebt)
					require.NoError(t, err, "seed %d", seed)
					assert.Empty(t, bad, "seed %d", seed)
				}
			})
		}
	}
}

// In Sync mode the same sequences run in Redis (gcra.lua), on Redis server
// TIME: x/time/rate is told the instants Redis decided at. The rate is high
// (2,000 per second) so that the time between steps refills the bucket.
func TestReserveParityInRedis(t *testing.T) {
	srv := redistest.Start(t)
	cases := []parityCase{
		{"token", PerSecond(2000).WithBurst(5), func() *rate.Limiter { return rate.NewLimiter(2000, 5) },
			rateparity.Options{Steps: 300, MaxN: 5}, false},
		{"leaky", PerSecond(2000).WithBurst(100_000).WithAlgorithm(LeakyBucket), func() *rate.Limiter { return rate.NewLimiter(2000, 1) },
			rateparity.Options{Steps: 300, MaxN: 1}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(3) {
				// A generous RedisTimeout: on a loaded machine a slow answer must
				// not send a step to degraded mode; this test is about parity.
				l := newLimiter(t, Config{Redis: srv.Client(t), Mode: Sync, Prefix: fmt.Sprintf("parity:%s:%d:", c.name, seed), RedisTimeout: 5 * time.Second})
				bad, err := rateparity.Run(rateparity.Ops(seed, c.opts), c.ref(), &syncSubject{l: l, lim: c.lim, queue: c.queue}, false)
				require.NoError(t, err, "seed %d", seed)
				assert.Empty(t, bad, "seed %d", seed)
			}
		})
	}
}

// At 1 per 100 ms on the leaky bucket: reserve a, b and c, cancel b, then
// reserve d. d goes after c, at 300 ms, as x/time/rate puts it: in memory
// and in Redis.
func TestCancelDoesNotDoubleBookASlot(t *testing.T) {
	ms := time.Millisecond
	lim := PerSecond(10).WithBurst(10).WithAlgorithm(LeakyBucket)
	srv := redistest.Start(t)
	for _, mode := range []Mode{LocalOnly, Async, Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := Config{Mode: mode, Clock: clock.NewManual(time.Unix(1_800_000_000, 0))}
			if mode != LocalOnly {
				cfg.Redis, cfg.Prefix, cfg.SyncInterval, cfg.RedisTimeout = srv.Client(t), "book:"+mode.String()+":", time.Hour, 5*time.Second
			}
			l := newLimiter(t, cfg)
			var rs []*Reservation
			for range 3 {
				r, err := l.Reserve(bg, "q", lim)
				require.NoError(t, err)
				require.True(t, r.OK())
				rs = append(rs, r)
			}
			require.NoError(t, rs[1].Cancel(bg))
			d, err := l.Reserve(bg, "q", lim)
			require.NoError(t, err)
			// In Redis, time runs on between the calls: d's wait is counted
			// from its own instant.
			assert.Equal(t, rs[2].TimeToAct().Add(100*ms), d.TimeToAct(), "d after c, not beside it")
			if mode != Sync {
				assert.Equal(t, 300*ms, d.Delay())
			}
			require.NoError(t, rs[1].Cancel(bg), "a second cancel does nothing")
			require.NoError(t, d.Cancel(bg))
			e, err := l.Reserve(bg, "q", lim)
			require.NoError(t, err)
			assert.Equal(t, d.TimeToAct(), e.TimeToAct(), "the last reservation, cancelled, is given back whole")
		})
	}
}

// WaitN blocks on the limiter's clock until the reservation may act, and
// gives it back if ctx ends first.
func TestWaitOnTheLimitersClock(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	l := newLimiter(t, Config{Clock: clk})
	lim := PerSecond(10).WithBurst(1) // one per 100 ms
	require.NoError(t, l.Wait(bg, "k", lim), "a full bucket: no wait")

	done := make(chan error, 1)
	go func() { done <- l.Wait(bg, "k", lim) }()
	require.Eventually(t, func() bool { return clk.Waiters() == 1 }, 10*time.Second, time.Millisecond)
	clk.Advance(99 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("returned before its time: %v", err)
	default:
	}
	clk.Advance(time.Millisecond)
	require.NoError(t, <-done)

	// Cancelled while waiting: the reservation is given back, so the next
	// one waits no longer than it would have without it.
	ctx, cancel := context.WithCancel(bg)
	go func() { done <- l.Wait(ctx, "k", lim) }()
	require.Eventually(t, func() bool { return clk.Waiters() == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	r, err := l.Reserve(bg, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, r.Delay())
}

// WaitN returns at once, reserving nothing, when the wait would outlast
// ctx's deadline; and it refuses what it can never do.
func TestWaitErrors(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	l := newLimiter(t, Config{Clock: clk})
	lim := PerSecond(10).WithBurst(2)
	require.NoError(t, l.WaitN(bg, "k", lim, 2))
	ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
	defer cancel()
	err := l.WaitN(ctx, "k", lim, 2) // would wait 200 ms
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	r, err := l.Reserve(bg, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, r.Delay(), "the refused wait reserved nothing")

	assert.ErrorIs(t, l.WaitN(bg, "k", lim, 3), ErrExceedsCapacity)
	r, err = l.ReserveN(bg, "k", lim, 3)
	assert.ErrorIs(t, err, ErrExceedsCapacity)
	require.NotNil(t, r, "a Reservation that is not OK, as x/time/rate's")
	assert.False(t, r.OK())
	assert.Equal(t, InfDuration, r.Delay())
	assert.False(t, rate.NewLimiter(10, 2).ReserveN(clk.Now(), 3).OK(), "x/time/rate's answer")
	assert.ErrorIs(t, l.Wait(bg, "k", PerSecond(10).WithAlgorithm(FixedWindow)), ErrUnsupported)
	_, err = l.Reserve(bg, "k", PerSecond(10).WithAlgorithm(SlidingWindowCounter))
	assert.ErrorIs(t, err, ErrUnsupported)
	_, err = l.Reserve(bg, "", lim)
	assert.ErrorIs(t, err, ErrInvalidKey)
	done, stop := context.WithCancel(bg)
	stop()
	assert.ErrorIs(t, l.Wait(done, "k", lim), context.Canceled)
}

// In Async mode a reservation made in memory may not wait longer than one
// burst tolerance, the debt reconciliation carries: beyond it, ReserveN
// refuses with the time until it would fit, and WaitN waits for that time
// and tries again.
func TestAsyncReservationsStayWithinOneTolerance(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	l := newLimiter(t, Config{Redis: srv.Client(t), SyncInterval: time.Hour, Clock: clk})
	lim := PerSecond(10).WithBurst(2) // tolerance 200 ms
	var waits []time.Duration
	for range 4 {
		r, err := l.Reserve(bg, "k", lim)
		require.NoError(t, err)
		require.True(t, r.OK())
		waits = append(waits, r.Delay())
	}
	assert.Equal(t, []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond}, waits)
	r, err := l.Reserve(bg, "k", lim)
	require.NoError(t, err)
	assert.False(t, r.OK(), "a 300 ms wait exceeds the 200 ms tolerance")
	assert.Equal(t, 100*time.Millisecond, r.RetryAfter)
	assert.Equal(t, InfDuration, r.DelayFrom(l.Now()))
	assert.True(t, r.TimeToAct().IsZero())

	// A Wait whose context has time for the 300 ms wait waits for it (it
	// used to give up at once: the wait beyond the tolerance was added to
	// the whole deadline rather than to the tolerance).
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx, "k", lim) }()
	require.Eventually(t, func() bool { return clk.Waiters() == 1 }, 10*time.Second, time.Millisecond)
	clk.Advance(100 * time.Millisecond) // the retry: now a 200 ms wait fits
	require.Eventually(t, func() bool { return clk.Waiters() == 1 }, 10*time.Second, time.Millisecond)
	clk.Advance(200 * time.Millisecond)
	require.NoError(t, <-done)

	// LocalOnly and Sync promise longer waits.
	local := newLimiter(t, Config{Clock: clk})
	for range 4 {
		_, err := local.Reserve(bg, "k", lim)
		require.NoError(t, err)
	}
	r, err = local.Reserve(bg, "k", lim)
	require.NoError(t, err)
	assert.True(t, r.OK())
	assert.Equal(t, 300*time.Millisecond, r.Delay())
	assert.Equal(t, r.TimeToAct(), local.Now().Add(300*time.Millisecond))
	assert.Equal(t, 200*time.Millisecond, r.DelayFrom(local.Now().Add(100*time.Millisecond)))
	clk.Advance(120 * time.Millisecond)
	assert.Equal(t, 180*time.Millisecond, r.Delay(), "what is left to wait, on the limiter's clock")
	clk.Advance(time.Second)
	assert.Zero(t, r.Delay())
}

// While degraded, reservations follow the fallback: FailOpen lets every
// one act at once, FailClosed refuses them until the breaker's next probe.
func TestReserveUnderFallbacks(t *testing.T) {
	lim := PerSecond(10).WithBurst(1)
	t.Run("fail open", func(t *testing.T) {
		cfg := deadRedis(t)
		cfg.Fallback, cfg.Mode = FailOpen, Sync
		cfg.Clock = clock.NewManual(time.Unix(1_800_000_000, 0))
		l := newLimiter(t, cfg)
		for range 3 {
			r, err := l.Reserve(bg, "k", lim)
			require.NoError(t, err)
			assert.True(t, r.OK())
			assert.Equal(t, Degraded, r.Source)
		}
		r, err := l.ReserveN(bg, "k", lim, 1)
		require.NoError(t, err)
		assert.True(t, r.OK())
		assert.Zero(t, r.Delay(), "past the tolerance: admitted at once")
	})
	t.Run("fail closed", func(t *testing.T) {
		cfg := deadRedis(t)
		cfg.Fallback = FailClosed
		l := newLimiter(t, cfg)
		r, err := l.Reserve(bg, "k", lim)
		require.NoError(t, err)
		assert.False(t, r.OK())
		assert.Equal(t, Degraded, r.Source)
		assert.Positive(t, r.RetryAfter)
		ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		defer cancel()
		assert.ErrorIs(t, l.Wait(ctx, "k", lim), context.DeadlineExceeded, "the probe is an hour away")
	})
}

// A reservation made in Redis and given back after Redis died stays
// counted, and Cancel says why.
func TestCancelWithoutRedis(t *testing.T) {
	srv := redistest.Start(t)
	l := newLimiter(t, Config{Redis: client(t, srv), Mode: Sync, Logger: quietLog, BreakerOpenFor: time.Hour})
	r, err := l.Reserve(bg, "k", PerSecond(10))
	require.NoError(t, err)
	require.Equal(t, Remote, r.Source)
	srv.Kill()
	err = r.Cancel(bg)
	assert.ErrorContains(t, err, `hybrid: cancel "k"`)
	_ = l.Close(bg) // what it could not report is another test's business
	r2 := &Reservation{Decision: Decision{Result: limit.Result{Allowed: true}}, l: l, key: "k", lim: PerSecond(10), n: 1}
	assert.ErrorIs(t, r2.Cancel(bg), ErrClosed)
}
