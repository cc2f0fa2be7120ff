package hybrid

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/remote"
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

// Every mistake in a Config is refused by New, each named by its field and
// value, all at once.
func TestConfigErrors(t *testing.T) {
	cases := []struct {
		cfg  Config
		want []string
	}{
		{Config{Mode: Mode(7)}, []string{"hybrid: Mode 7 is unknown (want Async, Sync or LocalOnly)"}},
		{Config{Fallback: Fallback(9)}, []string{"hybrid: Fallback 9 is unknown"}},
		{Config{SyncInterval: -time.Second}, []string{"hybrid: SyncInterval is negative (-1s)"}},
		{Config{SyncInterval: time.Microsecond}, []string{"hybrid: SyncInterval 1µs is below 1ms"}},
		{Config{LedgerTTL: -1}, []string{"hybrid: LedgerTTL is negative (-1ns)"}},
		{Config{RedisTimeout: -1}, []string{"hybrid: RedisTimeout is negative"}},
		{Config{BreakerOpenFor: -1}, []string{"hybrid: BreakerOpenFor is negative"}},
		{Config{StartupTimeout: -1}, []string{"hybrid: StartupTimeout is negative"}},
		{Config{ActiveWindow: time.Microsecond}, []string{"hybrid: ActiveWindow 1µs is below 1ms"}},
		{Config{Lease: time.Microsecond}, []string{"hybrid: Lease 1µs is below 1ms"}},
		{Config{Lease: time.Second, ShortLease: 2 * time.Second}, []string{"hybrid: ShortLease 2s is longer than Lease 1s"}},
		{Config{FleetSize: -1}, []string{"hybrid: FleetSize is negative (-1)"}},
		{Config{MaxKeys: -1}, []string{"hybrid: MaxKeys is negative (-1)"}},
		{Config{MaxPending: -2, MaxReports: -3, Lease: -time.Second},
			[]string{"hybrid: MaxPending is negative (-2)", "hybrid: MaxReports is negative (-3)", "hybrid: Lease is negative (-1s)"}},
		{Config{Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Prefix: "bad{prefix}"}, []string{"Prefix \"bad{prefix}\""}},
	}
	for _, tc := range cases {
		_, err := New(tc.cfg)
		require.Error(t, err, "%+v", tc.cfg)
		for _, w := range tc.want {
			assert.ErrorContains(t, err, w)
		}
		assert.Len(t, strings.Split(err.Error(), "\n"), len(tc.want), "one line per mistake: %v", err)
		if tc.cfg.Redis != nil {
			_ = tc.cfg.Redis.Close()
		}
	}
}

func TestAsyncDecidesInMemoryAndReconciles(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := newLimiter(t, Config{Redis: c, SyncInterval: 5 * time.Millisecond, Ledger: true})
	assert.Equal(t, Async, l.Mode())
	lim := Per(20, time.Hour) // nothing refills during the test
	admitted, sources := count(t, l, "k", lim, 30)
	assert.Equal(t, 20, admitted, "alone in the fleet, the whole burst")
	assert.Equal(t, map[Source]int{Local: 30}, sources)

	// The spend reaches the key's ledger in Redis when the node stops.
	require.NoError(t, l.Close(bg))
	assert.Equal(t, int64(20), ledger(t, c, "k", lim))
}

// ledger reads what the fleet reported admitting on (key, lim) in Async mode.
func ledger(t *testing.T, c redis.UniversalClient, key string, lim Limit) int64 {
	t.Helper()
	st, err := remote.New(c, remote.Options{})
	require.NoError(t, err)
	n, err := st.AsyncLedger(bg, key, lim)
	require.NoError(t, err)
	return n
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
		outage(t, Config{Fallback: FailOpen, Ledger: true}, func(l *Limiter, srv *redistest.Server) {
			admitted, _ := count(t, l, "k", lim, 100)
			assert.Equal(t, 100, admitted)
			admitted, _ = count(t, l, "k", lim, 50)
			assert.Equal(t, 50, admitted, "fail open admits past the limit")
			// The spend is kept and reaches the key's ledger when Redis
			// returns and the node flushes.
			srv.Restart()
			require.Eventually(t, func() bool { return !l.Degraded() }, 10*time.Second, 10*time.Millisecond)
			require.NoError(t, l.Close(bg))
			assert.Equal(t, int64(150), ledger(t, client(t, srv), "k", lim), "the outage's spend reached the ledger")
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
	t.Run("fail closed on a manual clock", func(t *testing.T) {
		// The breaker times its open state on the system clock (gobreaker
		// does): the wait it tells is not measured against the limiter's
		// clock, which a test or a replay sets anywhere.
		clk := clock.NewManual(time.Unix(1_000_000_000, 0))
		outage(t, Config{Fallback: FailClosed, Clock: clk}, func(l *Limiter, _ *redistest.Server) {
			d, err := l.Allow(bg, "k", lim)
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.Positive(t, d.RetryAfter)
			assert.LessOrEqual(t, d.RetryAfter, 100*time.Millisecond, "at most BreakerOpenFor: the breaker's next probe")
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
// After a long outage a node holds unreported spend on many keys. It must
// leave degraded mode at once (nothing waits on that spend: each key was
// decided in the node's share), and flush it to the ledgers in bounded
// calls, however much there is.
func TestRecoversWithALargeBacklog(t *testing.T) {
	const keys = 100_000 // one call of them all takes Redis over a second
	// A key holding one request expires when its bucket is full again (plus
	// the active window): a day's worth, so none expires while a loaded
	// machine drains the backlog.
	lim := Per(100, 24*time.Hour)
	outage(t, Config{Ledger: true}, func(l *Limiter, srv *redistest.Server) {
		for i := range keys {
			d, err := l.Allow(bg, fmt.Sprintf("backlog:%d", i), lim)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		srv.Restart()
		require.Eventually(t, func() bool { return !l.Degraded() && l.Stats().Breaker.String() == "closed" },
			time.Minute, 20*time.Millisecond, "Redis is back: degraded mode ends") // a hang guard
		ctx, cancel := context.WithTimeout(bg, 3*time.Minute) // a hang guard: seconds idle, a minute under load
		defer cancel()
		require.NoError(t, l.Close(ctx), "every key's spend is flushed")
		assert.Zero(t, l.Stats().Reconcile.LostSpend)
		c := client(t, srv)
		for _, i := range []int{0, keys / 2, keys - 1} {
			assert.Equal(t, int64(1), ledger(t, c, fmt.Sprintf("backlog:%d", i), lim), "key %d: its one request is in its ledger", i)
		}
	})
}

func TestCloseFlushesUnreportedSpend(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l, err := New(Config{Redis: c, SyncInterval: time.Hour, Ledger: true}) // no round will run on its own
	require.NoError(t, err)
	lim := Per(10, time.Hour)
	admitted, _ := count(t, l, "flush", lim, 7)
	require.Equal(t, 7, admitted)
	require.NoError(t, l.Close(bg))
	_, err = l.Allow(bg, "flush", lim)
	assert.ErrorIs(t, err, ErrClosed)
	assert.NoError(t, l.Close(bg), "closing twice is harmless")

	assert.Equal(t, int64(7), ledger(t, c, "flush", lim), "the 7 spent before Close are in Redis")
}

func TestCloseReportsWhatCouldNotBeFlushed(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	l, err := New(Config{Redis: c, SyncInterval: time.Hour, Ledger: true}) // the ledger has spend to send
	require.NoError(t, err)
	_, _ = count(t, l, "k", Per(10, time.Hour), 3)
	srv.Kill()
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	err = l.Close(ctx)
	assert.ErrorContains(t, err, "not reported")
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
