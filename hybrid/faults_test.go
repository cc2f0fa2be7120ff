package hybrid

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/internal/faultproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/remote"
)

// logged is a slog.Handler that keeps every record, for tests that check
// what the limiter says and how often.
type logged struct {
	mu   sync.Mutex
	recs []logRecord
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func newLogger() (*slog.Logger, *logged) {
	h := &logged{}
	return slog.New(h), h
}

func (h *logged) Enabled(context.Context, slog.Level) bool { return true }
func (h *logged) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logged) WithGroup(string) slog.Handler            { return h }
func (h *logged) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	h.recs = append(h.recs, rec)
	h.mu.Unlock()
	return nil
}

// find returns the records whose message contains part.
func (h *logged) find(part string) []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRecord
	for _, r := range h.recs {
		if strings.Contains(r.msg, part) {
			out = append(out, r)
		}
	}
	return out
}

func (h *logged) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range h.recs {
		fmt.Fprintf(&b, "%v %s %v\n", r.level, r.msg, r.attrs)
	}
	return b.String()
}

// Three Sync calls whose contexts had already expired leave the breaker
// closed: the caller's deadline is not Redis's failure. Under FailClosed an
// unrelated key is then still decided in Redis.
func TestCallerDeadlineDoesNotOpenTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	// A Redis timeout no loaded machine reaches: the test is about the
	// caller's deadline, not Redis's.
	l := newLimiter(t, Config{Redis: srv.Client(t), Mode: Sync, Fallback: FailClosed, RedisTimeout: 5 * time.Second})
	expired, cancel := context.WithDeadline(bg, time.Now().Add(-time.Millisecond))
	defer cancel()
	for range 3 {
		_, _ = l.Allow(expired, "k", PerSecond(10))
	}
	assert.Equal(t, breaker.Closed, l.Stats().Breaker, "the breaker stays closed")
	refused := 0
	for i := range 48 {
		d, err := l.Allow(bg, fmt.Sprint("other", i), PerSecond(10))
		require.NoError(t, err)
		if !d.Allowed {
			refused++
		}
	}
	assert.Zero(t, refused, "an unrelated key is decided in Redis, not refused")
}

// Close returns by its context's deadline whatever the client's options:
// with a round in flight on a Redis that stopped answering (a round that
// would hold on for its 1.5 s batch timeout), and with the breaker open. Its
// error counts the keys whose spend was not reported: all 100.
func TestCloseReturnsByItsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ctxTimeout bool
		fault      func(l *Limiter, srv *redistest.Server)
	}{
		{"round in flight", false, func(_ *Limiter, srv *redistest.Server) { srv.Pause() }},
		{"round in flight, ContextTimeoutEnabled", true, func(_ *Limiter, srv *redistest.Server) { srv.Pause() }},
		{"breaker open", false, func(l *Limiter, srv *redistest.Server) {
			srv.Kill()
			require.Eventually(t, l.Degraded, 10*time.Second, 5*time.Millisecond)
		}},
		{"breaker open, ContextTimeoutEnabled", true, func(l *Limiter, srv *redistest.Server) {
			srv.Kill()
			require.Eventually(t, l.Degraded, 10*time.Second, 5*time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = tc.ctxTimeout; o.MaxRetries = -1 })
			// Rounds every 300 ms, each call of one allowed 1.5 s.
			// With the ledger: the 100 keys' spend has somewhere to go.
			l, err := New(Config{Redis: c, SyncInterval: 300 * time.Millisecond, BreakerOpenFor: time.Hour, FleetSize: 1, Ledger: true})
			require.NoError(t, err)
			defer srv.Resume()
			tc.fault(l, srv)
			lim := Per(10, time.Hour)
			for i := range 100 {
				d, err := l.Allow(bg, fmt.Sprint("k", i), lim)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			time.Sleep(400 * time.Millisecond) // a round has begun, and hangs

			ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = l.Close(ctx)
			took := time.Since(start)
			t.Logf("Close took %v: %v", took, err)
			assert.Less(t, took, time.Second, "Close took %v with a 100 ms context", took)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "100 keys", "the error counts what was not reported")
		})
	}
}

// New's first contact is bounded by StartupTimeout, not by the per-call
// RedisTimeout nor the reconciler's batch timeout: a Redis 300 ms away is
// slow, not dead.
func TestFirstContactIsBoundedByStartupTimeout(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr())
	proxy.Latency(t, 150*time.Millisecond) // 300 ms a round trip
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	log, h := newLogger()
	l, err := New(Config{Redis: c, Logger: log, StartupTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer l.Close(bg)
	assert.False(t, l.Degraded(), "a slow Redis at start is not a dead one:\n%s", h)
}

// A node that starts degraded cannot know how many nodes share the limits:
// with the Conservative fallback it needs FleetSize, or it would take the
// whole limit for itself. A node that finds Redis at start does not: it
// learns the fleet from Redis.
func TestStartDegradedNeedsAFleetSize(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	up, err := New(Config{Redis: c, StartDegraded: true, StartupTimeout: 5 * time.Second})
	require.NoError(t, err, "redis answers: no fleet size needed")
	require.NoError(t, up.Close(bg))
	srv.Kill()
	l, err := New(Config{Redis: c, StartDegraded: true, StartupTimeout: 200 * time.Millisecond})
	if err == nil {
		admitted, _ := count(t, l, "k", Per(100, time.Hour), 200)
		_ = l.Close(bg)
		t.Logf("started degraded without a fleet size: admitted %d of a limit of 100", admitted)
	}
	require.ErrorIs(t, err, ErrRedisUnavailable)
	assert.ErrorContains(t, err, "FleetSize")
}

// Every breaker transition is logged once, with the failure that opened
// it: at Warn going down, at Info coming back; and so are the start and the
// end of degraded mode.
func TestBreakerTransitionsAreLogged(t *testing.T) {
	srv := redistest.Start(t)
	log, h := newLogger()
	l := newLimiter(t, Config{Redis: client(t, srv), Logger: log, SyncInterval: 10 * time.Millisecond,
		BreakerOpenFor: 100 * time.Millisecond, FleetSize: 2})
	srv.Kill()
	require.Eventually(t, l.Degraded, 5*time.Second, 5*time.Millisecond)
	srv.Restart()
	require.Eventually(t, func() bool { return !l.Degraded() && l.Stats().Breaker == breaker.Closed }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, l.Close(bg))

	opened := h.find("breaker open")
	require.NotEmpty(t, opened, "the opening is logged:\n%s", h)
	assert.Equal(t, slog.LevelWarn, opened[0].level)
	assert.NotEmpty(t, opened[0].attrs["cause"], "with its cause")
	halfOpen := h.find("breaker half-open")
	assert.Len(t, halfOpen, len(opened), "each opening is followed by one probe")
	closed := h.find("breaker closed")
	require.Len(t, closed, 1, "closed once:\n%s", h)
	assert.Equal(t, slog.LevelInfo, closed[0].level)
	st := l.Stats().BreakerCounts
	assert.Equal(t, int(st.Changes), len(opened)+len(halfOpen)+len(closed), "every transition logged once:\n%s", h)

	start, end := h.find("degraded mode started"), h.find("degraded mode ended")
	require.Len(t, start, 1, "\n%s", h)
	require.Len(t, end, 1, "\n%s", h)
	assert.Equal(t, slog.LevelWarn, start[0].level)
	assert.Equal(t, slog.LevelInfo, end[0].level)
}

// The breaker's log says when the probe comes: the OpenFor in force, the
// default when Config.BreakerOpenFor is zero (it logged "probe_in=0s"
// while the breaker waited 1 s).
func TestBreakerLogsTheProbeDelayInForce(t *testing.T) {
	srv := redistest.Start(t)
	log, h := newLogger()
	l := newLimiter(t, Config{Redis: client(t, srv), Logger: log, SyncInterval: 10 * time.Millisecond, FleetSize: 2})
	srv.Kill()
	require.Eventually(t, l.Degraded, 5*time.Second, 5*time.Millisecond)
	// The breaker logs its opening as it changes state, which a loaded
	// machine may finish after the engine is marked degraded.
	require.Eventually(t, func() bool { return len(h.find("breaker open")) > 0 }, 5*time.Second, 5*time.Millisecond, "the opening is logged:\n%s", h)
	opened := h.find("breaker open")
	assert.Equal(t, breaker.DefaultOpenFor.String(), opened[0].attrs["probe_in"])
}

// A step of the node's clock, forwards or backwards, is recognised at the
// next round: the limiter's time is Redis's again, and a key spent to its
// limit stays spent. Before the step was recognised, a forward jump of five
// minutes would refill every bucket on every round for as long as the
// offset took to slew back (about 100 minutes at 5%).
func TestNodeClockStepIsRecognisedWithinARound(t *testing.T) {
	for _, step := range []time.Duration{5 * time.Minute, -5 * time.Minute} {
		t.Run(step.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			// The node's clock runs with real time, as Redis's does, until
			// the test steps it: no sleeping, and no clock that stands
			// still while Redis's runs (which would be a step of its own).
			clk := &steppedClock{}
			l := newLimiter(t, Config{Redis: srv.Client(t), Clock: clk, SyncInterval: time.Hour}) // rounds only when the test runs them
			lim := PerSecond(50)
			round := func() { require.NoError(t, l.reconciler.Round(bg)) }
			offer := func(n int) int { got, _ := count(t, l, "k", lim, n); return got }

			began := time.Now()
			require.Equal(t, 50, offer(60), "the burst")
			round()
			clk.step.Store(int64(step))
			before := offer(60) // until the next round the node decides on its stepped clock
			round()
			after := 0
			for range 10 {
				after += offer(50)
				round()
			}
			// Redis refills in real time while the test runs: that much may
			// pass, and one burst of debt forgiven.
			bound := 50*time.Since(began).Seconds() + 50
			t.Logf("step %v: %d admitted before the round that saw it, %d in the 10 rounds after (bound %.0f)", step, before, after, bound)
			assert.LessOrEqual(t, before, 50, "at most one burst before the step is seen")
			assert.LessOrEqual(t, float64(after), bound, "the key stays within its limit once the step is seen")
			assert.Equal(t, uint64(1), l.Stats().Faults.ClockSteps, "the step is counted")
			redisNow, err := srv.Client(t).Time(bg).Result()
			require.NoError(t, err)
			assert.InDelta(t, float64(redisNow.UnixNano()), float64(l.Now().UnixNano()), float64(2*time.Second),
				"the limiter's time is Redis's again")
		})
	}
}

// steppedClock is the real clock, stepped by step.
type steppedClock struct{ step atomic.Int64 }

func (c *steppedClock) Now() time.Time { return time.Now().Add(time.Duration(c.step.Load())) }

// A key of another type under the prefix (someone else's data): a Sync
// decision on it is made under the fallback, the key is logged once by name
// and counted, and the breaker counts it as neither a success (which would
// hide it) nor a failure (Redis is healthy).
func TestKeyOfAnotherType(t *testing.T) {
	srv := redistest.Start(t)
	_, err := srv.Do("SET", "rl:tb:{theirs}:100/1h0m0s/100", "not a bucket")
	require.NoError(t, err)
	log, h := newLogger()
	l := newLimiter(t, Config{Redis: srv.Client(t), Mode: Sync, Logger: log, FleetSize: 4, RedisTimeout: 5 * time.Second})
	lim := Per(100, time.Hour)
	admitted, sources := count(t, l, "theirs", lim, 40)
	assert.Equal(t, 25, admitted, "the conservative fallback: a quarter, FleetSize being 4")
	assert.Equal(t, map[Source]int{Degraded: 40}, sources)
	st := l.Stats()
	assert.Equal(t, uint64(40), st.Faults.KeyFaults)
	assert.Equal(t, uint64(40), st.DecisionCalls.Closed, "each decision asked Redis")
	assert.GreaterOrEqual(t, st.BreakerCounts.Excluded, uint64(40), "a key fault is counted neither as a success (which would hide it) nor as a failure: %+v", st.BreakerCounts)
	assert.Equal(t, breaker.Closed, st.Breaker)
	logged := h.find("value of another type")
	require.Len(t, logged, 1, "logged once:\n%s", h)
	assert.Equal(t, "theirs", logged[0].attrs["key"])

	// Other keys are decided in Redis all along.
	d, err := l.Allow(bg, "ours", lim)
	require.NoError(t, err)
	assert.Equal(t, Remote, d.Source)
}

// At start the limiter reads Redis's eviction policy and warns, once, when
// it can evict the limiter's keys, or when it cannot be read.
func TestEvictionPolicyIsCheckedAtStart(t *testing.T) {
	for _, tc := range []struct {
		policy         string
		user           bool // a least-privileged user, who may not read it
		warn           string
		evict, uncheck uint64
	}{
		{policy: "noeviction"},
		{policy: "allkeys-lru", warn: "can evict", evict: 1},
		{policy: "volatile-lru", warn: "can evict", evict: 1},
		{policy: "volatile-ttl", warn: "volatile-ttl evicts the keys in use first", evict: 1},
		{policy: "noeviction", user: true, warn: "could not check", uncheck: 1},
	} {
		t.Run(fmt.Sprintf("%s user=%v", tc.policy, tc.user), func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", tc.policy))
			c := srv.Client(t)
			if tc.user {
				_, err := srv.Do("ACL", "SETUSER", "limiter", "on", ">pw", "~rl:*", "+@all", "-config", "-info")
				require.NoError(t, err)
				c = srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "limiter", "pw" })
			}
			log, h := newLogger()
			l := newLimiter(t, Config{Redis: c, Logger: log})
			st := l.Stats().Faults
			assert.Equal(t, tc.evict, st.EvictingPolicy)
			assert.Equal(t, tc.uncheck, st.UncheckedPolicy)
			if tc.warn == "" {
				assert.Empty(t, h.find("maxmemory-policy"), "\n%s", h)
				return
			}
			got := h.find(tc.warn)
			require.Len(t, got, 1, "\n%s", h)
			assert.Equal(t, slog.LevelWarn, got[0].level)
			if tc.evict > 0 {
				assert.Equal(t, tc.policy, got[0].attrs["maxmemory_policy"])
			}
		})
	}
}

// Evictions are watched while the limiter runs, not only the policy at
// start: Redis's count of evicted keys is read every EvictionCheck, and an
// increase is counted in Faults.Evictions and logged once. The Redis is
// full under volatile-ttl, which evicts the key in use first (see
// remote's TestVolatileTTLEvictsTheKeysInUseFirst: 300 of 300 admitted
// there, where 100 are allowed); a Sync node's decisions name its estimate
// of the key, so each time the key is found gone it is restored from it
// (StateLost) and the node admits what is allowed, no more.
func TestEvictionsAreLoggedAndCounted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every time.Duration
	}{{"watched", 20 * time.Millisecond}, {"not watched", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "2mb", "--maxmemory-policy", "volatile-ttl", "--maxmemory-samples", "64"))
			other := srv.Client(t)
			log, h := newLogger()
			l := newLimiter(t, Config{Redis: client(t, srv), Mode: Sync, RedisTimeout: 5 * time.Second, SyncInterval: 10 * time.Millisecond,
				EvictionCheck: tc.every, Logger: log})
			require.Len(t, h.find("volatile-ttl evicts the keys in use first"), 1, "\n%s", h)
			for i := range 100 { // another client's data, living a day, fills Redis
				require.NoError(t, other.Set(bg, fmt.Sprint("old:", i), strings.Repeat("v", 20<<10), 24*time.Hour).Err())
			}
			lim := Per(100, time.Hour)
			admitted := 0
			for i := range 300 {
				d, err := l.Allow(bg, "hot", lim)
				require.NoError(t, err)
				require.Equal(t, Remote, d.Source)
				if d.Allowed {
					admitted++
				}
				require.NoError(t, other.Set(bg, fmt.Sprint("new:", i), strings.Repeat("v", 2<<10), 24*time.Hour).Err())
			}
			assert.Equal(t, 100, admitted, "restored from the node's estimate each time")
			assert.Positive(t, l.Stats().StateLost, "the key was found gone")

			if tc.every < 0 {
				rounds := l.Stats().Reconcile.Rounds
				require.Eventually(t, func() bool { return l.Stats().Reconcile.Rounds >= rounds+20 }, 10*time.Second, 5*time.Millisecond)
				assert.Zero(t, l.Stats().Faults.Evictions, "never read")
				assert.Empty(t, h.find("redis evicted keys"))
				return
			}
			require.Eventually(t, func() bool { return l.Stats().Faults.Evictions > 0 }, 10*time.Second, 5*time.Millisecond)
			more := l.Stats().Faults.Evictions
			for i := range 100 {
				require.NoError(t, other.Set(bg, fmt.Sprint("more:", i), strings.Repeat("v", 20<<10), 24*time.Hour).Err())
			}
			require.Eventually(t, func() bool { return l.Stats().Faults.Evictions > more }, 10*time.Second, 5*time.Millisecond, "counted again")
			got := h.find("redis evicted keys")
			require.Len(t, got, 1, "logged once\n%s", h)
			assert.Equal(t, slog.LevelWarn, got[0].level)
			evicted, err := remote.New(other, remote.Options{})
			require.NoError(t, err)
			n, err := evicted.EvictedKeys(bg)
			require.NoError(t, err)
			assert.LessOrEqual(t, l.Stats().Faults.Evictions, uint64(n), "no more than Redis evicted")
		})
	}
}

// While the breaker is open, no decision calls Redis: counted by the
// breaker state that let each call through, which a starved scheduler
// cannot fake as a wall-clock bound can be.
func TestNoDecisionCallsRedisWhileTheBreakerIsOpen(t *testing.T) {
	srv := redistest.Start(t)
	l := newLimiter(t, Config{Redis: client(t, srv), Mode: Sync, SyncInterval: 10 * time.Millisecond,
		BreakerOpenFor: 50 * time.Millisecond, FleetSize: 2})
	lim := Per(1000, time.Hour)
	_, _ = count(t, l, "k", lim, 10)
	require.Equal(t, uint64(10), l.Stats().DecisionCalls.Closed)
	srv.Kill()
	require.Eventually(t, l.Degraded, 5*time.Second, time.Millisecond)
	for range 5 {
		_, sources := count(t, l, "k", lim, 200)
		assert.Positive(t, sources[Degraded])
		time.Sleep(30 * time.Millisecond) // through several half-open probes
	}
	st := l.Stats()
	assert.Zero(t, st.DecisionCalls.Open, "no decision called Redis while the breaker was open")
	assert.LessOrEqual(t, st.DecisionCalls.Probes, st.BreakerCounts.Probes, "decisions called Redis only as probes")
	t.Logf("decision calls: %+v; breaker: %+v", st.DecisionCalls, st.BreakerCounts)
}
