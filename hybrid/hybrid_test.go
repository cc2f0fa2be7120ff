package hybrid

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

func TestMain(m *testing.M) {
	redistest.QuietClientLogs() // go-redis logs every dial the outages fail
	goleak.VerifyTestMain(m)
}

var bg = context.Background()

// newLimiter makes a limiter closed at the end of the test.
func newLimiter(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(bg) })
	return l
}

// checker is a Sync limiter that reads what Redis holds: its timeout long
// enough that a loaded machine does not send it to the fallback (it would
// then read its own empty memory).
func checker(t testing.TB, c redis.UniversalClient) *Limiter {
	return newLimiter(t, Config{Redis: c, Mode: Sync, RedisTimeout: 5 * time.Second})
}

// client returns a fresh client of srv with settings fit for failure tests:
// short timeouts, no retries.
func client(t testing.TB, srv *redistest.Server) *redis.Client {
	return srv.Client(t, func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialTimeout = 200 * time.Millisecond
		o.ReadTimeout = 200 * time.Millisecond
		o.WriteTimeout = 200 * time.Millisecond
		o.PoolTimeout = 200 * time.Millisecond
	})
}

// count decides times and returns how many were admitted.
func count(t testing.TB, l *Limiter, key string, lim Limit, times int) (admitted int, sources map[Source]int) {
	t.Helper()
	sources = map[Source]int{}
	for range times {
		d, err := l.Allow(bg, key, lim)
		require.NoError(t, err)
		sources[d.Source]++
		if d.Allowed {
			admitted++
		}
	}
	return admitted, sources
}

func TestLocalOnly(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	l := newLimiter(t, Config{Clock: clk})
	assert.Equal(t, LocalOnly, l.Mode())
	lim := PerSecond(10).WithBurst(5)
	admitted, sources := count(t, l, "k", lim, 8)
	assert.Equal(t, 5, admitted)
	assert.Equal(t, map[Source]int{Local: 8}, sources)
	d, err := l.Allow(bg, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, d.RetryAfter)
	clk.Advance(100 * time.Millisecond)
	d, _ = l.Allow(bg, "k", lim)
	assert.True(t, d.Allowed)
	assert.False(t, l.Degraded())
	assert.Equal(t, clk.Now(), l.Now())
}

func TestBadInputIsAnErrorThatChangesNothing(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []Mode{LocalOnly, Async, Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := Config{Mode: mode}
			if mode != LocalOnly {
				cfg.Redis = srv.Client(t)
				cfg.Prefix = "bad:" + mode.String() + ":"
			}
			l := newLimiter(t, cfg)
			cases := []struct {
				key  string
				lim  Limit
				n    int64
				want error
			}{
				{"", PerSecond(1), 1, ErrInvalidKey},
				{string(make([]byte, limit.MaxKeyLen+1)), PerSecond(1), 1, ErrInvalidKey},
				{"k", PerSecond(0), 1, ErrInvalidLimit},
				{"k", PerSecond(10).WithBurst(-1), 1, ErrInvalidLimit},
				{"k", PerSecond(10).WithBurst(3), 4, ErrExceedsCapacity},
				{"k", PerSecond(10), -1, ErrInvalidN},
			}
			for _, tc := range cases {
				_, err := l.AllowN(bg, tc.key, tc.lim, tc.n)
				assert.ErrorIs(t, err, tc.want)
			}
			d, err := l.AllowN(bg, "k", PerSecond(10).WithBurst(3), 3)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "nothing was spent by the bad calls")
			assert.False(t, l.Degraded(), "a caller's mistake is not Redis's failure")
		})
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []Config{
		{Mode: Mode(7)},
		{Fallback: Fallback(9)},
		{SyncInterval: -time.Second},
		{SyncInterval: time.Microsecond},
		{FleetSize: -1},
		{MaxKeys: -1},
		{Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Prefix: "bad{prefix}"},
	}
	for _, c := range cases {
		_, err := New(c)
		assert.Error(t, err, "%+v", c)
		if c.Redis != nil {
			_ = c.Redis.Close()
		}
	}
}

func TestAsyncDecidesInMemoryAndReconciles(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := newLimiter(t, Config{Redis: c, SyncInterval: 5 * time.Millisecond})
	assert.Equal(t, Async, l.Mode())
	lim := Per(20, time.Hour) // nothing refills during the test
	admitted, sources := count(t, l, "k", lim, 30)
	assert.Equal(t, 20, admitted, "alone in the fleet, the whole burst")
	assert.Equal(t, map[Source]int{Local: 30}, sources)

	// The spend reaches Redis: a synchronous limiter on the same key sees it.
	require.Eventually(t, func() bool { return l.Stats().Reconcile.KeysSent > 0 }, 5*time.Second, 5*time.Millisecond)
	d, err := checker(t, c).Allow(bg, "k", lim)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "Redis holds the async node's spend")
	assert.Equal(t, Remote, d.Source)
}

func TestTwoAsyncNodesShareOneLimit(t *testing.T) {
	srv := redistest.Start(t)
	lim := Per(100, time.Hour)
	a := newLimiter(t, Config{Redis: srv.Client(t), SyncInterval: 5 * time.Millisecond, Node: "a"})
	b := newLimiter(t, Config{Redis: srv.Client(t), SyncInterval: 5 * time.Millisecond, Node: "b"})
	total := 0
	for range 40 { // a trickle from both, so shares and state converge
		for _, l := range []*Limiter{a, b} {
			got, _ := count(t, l, "shared", lim, 5)
			total += got
		}
		time.Sleep(5 * time.Millisecond)
	}
	assert.InDelta(t, 100, total, 10, "two nodes together admit about the one limit, not twice it")
}

func TestSyncIsExactAcrossNodes(t *testing.T) {
	srv := redistest.Start(t)
	lim := Per(10, time.Hour)
	// Redis timeouts no loaded machine reaches: a decision that timed out
	// would be made from memory, not exactly.
	a := newLimiter(t, Config{Redis: srv.Client(t), Mode: Sync, Node: "a", RedisTimeout: 5 * time.Second})
	b := newLimiter(t, Config{Redis: srv.Client(t), Mode: Sync, Node: "b", RedisTimeout: 5 * time.Second})
	total := 0
	for range 10 {
		for _, l := range []*Limiter{a, b} {
			got, sources := count(t, l, "exact", lim, 1)
			total += got
			assert.Equal(t, map[Source]int{Remote: 1}, sources)
		}
	}
	assert.Equal(t, 10, total)
}

func TestSlidingLogNeedsSyncOrLocal(t *testing.T) {
	srv := redistest.Start(t)
	log := Per(3, time.Hour).WithAlgorithm(SlidingWindowLog)
	async := newLimiter(t, Config{Redis: srv.Client(t)})
	_, err := async.Allow(bg, "log", log)
	assert.ErrorIs(t, err, ErrUnsupported)
	assert.ErrorContains(t, err, "use sync or local mode")

	sync := checker(t, srv.Client(t))
	admitted, _ := count(t, sync, "log", log, 5)
	assert.Equal(t, 3, admitted)
	local := newLimiter(t, Config{})
	admitted, _ = count(t, local, "log", log, 5)
	assert.Equal(t, 3, admitted)
}

func TestUnreachableRedisAtStart(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	srv.Kill()
	_, err := New(Config{Redis: c, StartupTimeout: 500 * time.Millisecond})
	assert.ErrorIs(t, err, ErrRedisUnavailable)

	// StartDegraded: up at once, degraded, and healthy when Redis returns.
	l := newLimiter(t, Config{Redis: c, StartDegraded: true, FleetSize: 4, SyncInterval: 10 * time.Millisecond,
		BreakerOpenFor: 50 * time.Millisecond, StartupTimeout: 300 * time.Millisecond})
	assert.True(t, l.Degraded())
	admitted, sources := count(t, l, "k", Per(100, time.Hour), 100)
	assert.Equal(t, 25, admitted, "a quarter of the limit, FleetSize being 4")
	assert.Equal(t, map[Source]int{Degraded: 100}, sources)
	srv.Restart()
	require.Eventually(t, func() bool { return !l.Degraded() }, 10*time.Second, 10*time.Millisecond, "healthy once Redis returns")
}

// outage runs fn against a limiter whose Redis has just died.
func outage(t *testing.T, cfg Config, fn func(l *Limiter, srv *redistest.Server)) {
	srv := redistest.Start(t)
	cfg.Redis = client(t, srv)
	cfg.SyncInterval = 10 * time.Millisecond
	cfg.BreakerOpenFor = 100 * time.Millisecond
	l := newLimiter(t, cfg)
	srv.Kill()
	require.Eventually(t, l.Degraded, 5*time.Second, 5*time.Millisecond, "the breaker opens")
	fn(l, srv)
}

func TestFallbacks(t *testing.T) {
	lim := Per(100, time.Hour)
	t.Run("conservative", func(t *testing.T) {
		outage(t, Config{FleetSize: 4}, func(l *Limiter, _ *redistest.Server) {
			admitted, sources := count(t, l, "k", lim, 100)
			assert.Equal(t, 25, admitted)
			assert.Equal(t, map[Source]int{Degraded: 100}, sources)
		})
	})
	t.Run("fail open", func(t *testing.T) {
		outage(t, Config{Fallback: FailOpen}, func(l *Limiter, srv *redistest.Server) {
			admitted, _ := count(t, l, "k", lim, 100)
			assert.Equal(t, 100, admitted)
			admitted, _ = count(t, l, "k", lim, 50)
			assert.Equal(t, 50, admitted, "fail open admits past the limit")
			// The spend is kept and reported when Redis returns: the key is
			// in debt, capped at one more burst.
			srv.Restart()
			require.Eventually(t, func() bool { return !l.Degraded() && l.Stats().Reconcile.Pending == 0 }, 10*time.Second, 10*time.Millisecond)
			v, err := srv.Do("HGET", "rl:tb:{k}", "l")
			require.NoError(t, err)
			assert.NotNil(t, v, "the outage's spend reached Redis")
		})
	})
	t.Run("fail closed", func(t *testing.T) {
		outage(t, Config{Fallback: FailClosed}, func(l *Limiter, _ *redistest.Server) {
			d, err := l.Allow(bg, "k", lim)
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.Equal(t, Degraded, d.Source)
			assert.Positive(t, d.RetryAfter)
			_, err = l.Allow(bg, "", lim)
			assert.ErrorIs(t, err, ErrInvalidKey, "bad input is still an error")
		})
	})
	t.Run("sync falls back too", func(t *testing.T) {
		outage(t, Config{Mode: Sync, FleetSize: 2}, func(l *Limiter, _ *redistest.Server) {
			start := time.Now()
			admitted, sources := count(t, l, "k", lim, 100)
			assert.Less(t, time.Since(start), time.Second, "an open breaker: nobody waits on Redis")
			assert.Equal(t, 50, admitted)
			assert.Equal(t, map[Source]int{Degraded: 100}, sources)
		})
	})
}

// After a long outage a node holds unreported spend on many keys. It must
// drain that backlog and leave degraded mode, however large the backlog:
// a round that sent it all in one call would outlast every timeout and fail
// forever.
func TestRecoversWithALargeBacklog(t *testing.T) {
	const keys = 100_000 // one call of them all takes Redis over a second
	// A key holding one request expires when its bucket is full again (plus
	// the active window): a day's worth, so none expires while a loaded
	// machine drains the backlog.
	lim := Per(100, 24*time.Hour)
	outage(t, Config{}, func(l *Limiter, srv *redistest.Server) {
		for i := range keys {
			d, err := l.Allow(bg, fmt.Sprintf("backlog:%d", i), lim)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		srv.Restart()
		// Every key acknowledged once (KeysSent counts the reports of calls
		// that succeeded), nothing pending, and the breaker closed.
		drained := func() bool {
			st := l.Stats().Reconcile
			return st.KeysSent >= keys && st.Pending == 0 && !l.Degraded()
		}
		// A hang guard: about 5 s idle, over a minute under load.
		require.Eventually(t, drained, 3*time.Minute, 50*time.Millisecond, "the backlog drains")
		assert.Zero(t, l.Stats().Reconcile.LostSpend)

		n, err := srv.Do("DBSIZE")
		require.NoError(t, err)
		assert.GreaterOrEqual(t, n, int64(keys), "every key's spend reached Redis")
		sync := checker(t, client(t, srv))
		for _, i := range []int{0, keys / 2, keys - 1} {
			d, err := sync.AllowN(bg, fmt.Sprintf("backlog:%d", i), lim, 0)
			require.NoError(t, err)
			require.Equal(t, Remote, d.Source)
			assert.Equal(t, int64(99), d.Remaining, "key %d: its one request is in Redis", i)
		}
	})
}

func TestCloseFlushesUnreportedSpend(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l, err := New(Config{Redis: c, SyncInterval: time.Hour}) // no round will run on its own
	require.NoError(t, err)
	lim := Per(10, time.Hour)
	admitted, _ := count(t, l, "flush", lim, 7)
	require.Equal(t, 7, admitted)
	require.NoError(t, l.Close(bg))
	_, err = l.Allow(bg, "flush", lim)
	assert.ErrorIs(t, err, ErrClosed)
	assert.NoError(t, l.Close(bg), "closing twice is harmless")

	d, err := checker(t, c).AllowN(bg, "flush", lim, 0)
	require.NoError(t, err)
	require.Equal(t, Remote, d.Source)
	assert.Equal(t, int64(3), d.Remaining, "the 7 spent before Close are in Redis")
}

func TestCloseReportsWhatCouldNotBeFlushed(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	l, err := New(Config{Redis: c, SyncInterval: time.Hour})
	require.NoError(t, err)
	_, _ = count(t, l, "k", Per(10, time.Hour), 3)
	srv.Kill()
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	err = l.Close(ctx)
	assert.ErrorContains(t, err, "not reported")
}

func TestReserveAndWait(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []Mode{LocalOnly, Async, Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := Config{Mode: mode, RedisTimeout: 5 * time.Second} // no loaded machine sends a reservation to the fallback
			if mode != LocalOnly {
				cfg.Redis = srv.Client(t)
				cfg.Prefix = "wait:" + mode.String() + ":"
			}
			l := newLimiter(t, cfg)
			lim := PerSecond(20).WithBurst(3).WithAlgorithm(LeakyBucket) // one per 50 ms, three queued
			start := time.Now()
			for range 3 {
				require.NoError(t, l.Wait(bg, "q", lim, 1))
			}
			assert.GreaterOrEqual(t, time.Since(start), 90*time.Millisecond, "the third waited two intervals")

			// Two reservations in a row on a queue leaking one a second: the
			// second waits its turn behind the first (no scheduler delays a
			// second call by a second).
			slow := PerMinute(60).WithBurst(3).WithAlgorithm(LeakyBucket)
			first, err := l.Reserve(bg, "q2", slow, 1)
			require.NoError(t, err)
			r, err := l.Reserve(bg, "q2", slow, 1)
			require.NoError(t, err)
			assert.True(t, first.Allowed)
			assert.True(t, r.Allowed)
			assert.Positive(t, r.Delay)

			// Behind those two, a third would wait about two seconds.
			ctx, cancel := context.WithTimeout(bg, 10*time.Millisecond)
			defer cancel()
			err = l.Wait(ctx, "q2", slow, 1)
			assert.ErrorIs(t, err, context.DeadlineExceeded, "a wait past the deadline returns at once")

			_, err = l.Reserve(bg, "q", PerSecond(10), 1)
			assert.ErrorIs(t, err, ErrUnsupported)
		})
	}
}

func TestStats(t *testing.T) {
	srv := redistest.Start(t)
	l := newLimiter(t, Config{Redis: srv.Client(t), SyncInterval: 5 * time.Millisecond})
	_, _ = count(t, l, "a", PerSecond(10), 3)
	require.Eventually(t, func() bool { return l.Stats().Reconcile.Rounds > 2 }, 5*time.Second, 5*time.Millisecond)
	s := l.Stats()
	assert.Equal(t, Async, s.Mode)
	assert.Equal(t, 1, s.Keys)
	assert.Equal(t, 1, s.Reconcile.Nodes)
	assert.False(t, s.Degraded)
	assert.Equal(t, "closed", s.Breaker.String())
}

func TestStringers(t *testing.T) {
	for want, s := range map[string]fmt.Stringer{
		"async": Async, "sync": Sync, "local": LocalOnly, "mode(9)": Mode(9),
		"conservative": Conservative, "fail-open": FailOpen, "fail-closed": FailClosed, "fallback(9)": Fallback(9),
		"local ": Local, "remote": Remote, "degraded": Degraded, "source(9)": Source(9),
	} {
		assert.Equal(t, want, s.String()+map[bool]string{true: " ", false: ""}[want == "local "])
	}
	assert.True(t, errors.Is(fmt.Errorf("x: %w", ErrClosed), ErrClosed))
}
