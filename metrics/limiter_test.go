package metrics

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
	"github.com/hybridlimit/hybridlimit/sync/reports"
	"github.com/hybridlimit/hybridlimit/sync/round"
)

var bg = context.Background()

// newLimiter makes a limiter closed at the end of the test.
func newLimiter(t testing.TB, cfg hybrid.Config) *hybrid.Limiter {
	t.Helper()
	l, err := hybrid.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(bg) })
	return l
}

// shortTimeouts fits a client for failure tests: short timeouts, no retries.
func shortTimeouts(o *redis.Options) {
	o.MaxRetries = -1
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = 200 * time.Millisecond
	o.WriteTimeout = 200 * time.Millisecond
	o.PoolTimeout = 200 * time.Millisecond
}

func TestLimiterCollectorLocalOnly(t *testing.T) {
	l := newLimiter(t, hybrid.Config{})
	for i := range 3 {
		_, err := l.Allow(bg, fmt.Sprintf("k%d", i), hybrid.PerSecond(10))
		require.NoError(t, err)
	}
	c := NewLimiterCollector(l, "")
	require.NoError(t, collectAndCompare(c, `
		# HELP rate_limit_degraded 1 while the limiter decides under its fallback because Redis failed, else 0.
		# TYPE rate_limit_degraded gauge
		rate_limit_degraded 0
		# HELP rate_limit_keys_evicted_total Keys evicted from node memory, least recently used first, to hold the bound on keys (MaxKeys): an evicted key that comes back starts as spent as it was.
		# TYPE rate_limit_keys_evicted_total counter
		rate_limit_keys_evicted_total 0
		# HELP rate_limit_keys_in_memory Keys the limiter holds in node memory.
		# TYPE rate_limit_keys_in_memory gauge
		rate_limit_keys_in_memory 3
		# HELP rate_limit_mode The mode the limiter runs in (async, sync or local): 1 for its mode.
		# TYPE rate_limit_mode gauge
		rate_limit_mode{mode="local"} 1
	`))
	assert.Equal(t, 4, collectAndCount(t, c), "a local limiter has no breaker, Redis or rounds to report")
}

// TestLimiterCollectorEveryValue feeds the collector a Stats with every
// field set, to see each metric carry its own field.
func TestLimiterCollectorEveryValue(t *testing.T) {
	stats := hybrid.Stats{
		Mode:          hybrid.Sync,
		Degraded:      true,
		Breaker:       breaker.HalfOpen,
		BreakerCounts: breaker.Counts{Successes: 100, Failures: 7, Timeouts: 3, Rejected: 40, Changes: 5},
		Reconcile: round.Stats{Rounds: 1000, RoundErrors: 12, KeysSent: 5000, LostSpend: 17, PendingDropped: 5, PendingBytes: 4096, Pending: 9, Nodes: 4,
			LastRound: 1500 * time.Microsecond, Deferred: 21, KeyFaults: 4, Leases: 25,
			Shares: protocol.Stats{Asks: 22, Calls: 23, Resets: 24}},
		StateLost:          26,
		HeavyRefused:       27,
		AskTimeouts:        31,
		EvictionsForgotten: 28,
		Evictions:          29,
		Keys:               1234,
		ClockOffset:        -2500 * time.Microsecond,
		Faults:             hybrid.Faults{EvictingPolicy: 1, UncheckedPolicy: 0, KeyFaults: 6, ClockSteps: 2, Evictions: 29},
		DecisionCalls:      hybrid.DecisionCalls{Closed: 90, Probes: 3, Open: 0},
	}
	c := newLimiterCollector(func() hybrid.Stats { return stats }, "edge")
	require.NoError(t, collectAndCompare(c, `
		# HELP edge_breaker_rejected_total Calls to Redis the breaker refused without making them: it was open, or too many calls were in flight.
		# TYPE edge_breaker_rejected_total counter
		edge_breaker_rejected_total 40
		# HELP edge_breaker_state The Redis circuit breaker's state: 1 for the current state (closed, half-open or open), 0 for the others.
		# TYPE edge_breaker_state gauge
		edge_breaker_state{state="closed"} 0
		edge_breaker_state{state="half-open"} 1
		edge_breaker_state{state="open"} 0
		# HELP edge_breaker_transitions_total State transitions of the Redis circuit breaker.
		# TYPE edge_breaker_transitions_total counter
		edge_breaker_transitions_total 5
		# HELP edge_clock_offset_seconds Offset applied to this node's clock to align it with Redis server time, in seconds.
		# TYPE edge_clock_offset_seconds gauge
		edge_clock_offset_seconds -0.0025
		# HELP edge_decision_redis_calls_total Calls to Redis made to decide (sync mode), by the breaker state that let them through: closed, half-open (a probe), or open (never: while the breaker is open no decision waits on Redis).
		# TYPE edge_decision_redis_calls_total counter
		edge_decision_redis_calls_total{breaker="closed"} 90
		edge_decision_redis_calls_total{breaker="half-open"} 3
		edge_decision_redis_calls_total{breaker="open"} 0
		# HELP edge_degraded 1 while the limiter decides under its fallback because Redis failed, else 0.
		# TYPE edge_degraded gauge
		edge_degraded 1
		# HELP edge_faults_total Faults that change decisions without stopping Redis, each logged: an eviction policy that can evict the limiter's keys, or that could not be read (at start), decisions and reports on a key of another type (made under the fallback), clock steps (corrected), a key's state Redis lost while this node had spent on it (restored), evicted keys whose record was forgotten (they may come back fresher), keys Redis evicted (any of them may have been the limiter's). Should stay 0.
		# TYPE edge_faults_total counter
		edge_faults_total{fault="clock_step"} 2
		edge_faults_total{fault="evicting_policy"} 1
		edge_faults_total{fault="eviction_forgotten"} 28
		edge_faults_total{fault="key_of_another_type"} 10
		edge_faults_total{fault="redis_evicted_keys"} 29
		edge_faults_total{fault="state_lost"} 26
		edge_faults_total{fault="unchecked_policy"} 0
		# HELP edge_fleet_nodes Nodes active in the fleet, as Redis reported at the last successful round.
		# TYPE edge_fleet_nodes gauge
		edge_fleet_nodes 4
		# HELP edge_heavy_refused_total Requests refused while degraded (or on a key Redis refuses) because they weigh more than this node's share of their limit: every node deciding alone could admit one at once.
		# TYPE edge_heavy_refused_total counter
		edge_heavy_refused_total 27
		# HELP edge_keys_evicted_total Keys evicted from node memory, least recently used first, to hold the bound on keys (MaxKeys): an evicted key that comes back starts as spent as it was.
		# TYPE edge_keys_evicted_total counter
		edge_keys_evicted_total 29
		# HELP edge_keys_in_memory Keys the limiter holds in node memory.
		# TYPE edge_keys_in_memory gauge
		edge_keys_in_memory 1234
		# HELP edge_mode The mode the limiter runs in (async, sync or local): 1 for its mode.
		# TYPE edge_mode gauge
		edge_mode{mode="sync"} 1
		# HELP edge_redis_errors_total Calls to Redis that failed, through the circuit breaker: connection and Redis errors, timeouts, and calls refused because too many were in flight. Should stay 0.
		# TYPE edge_redis_errors_total counter
		edge_redis_errors_total 7
		# HELP edge_redis_successes_total Calls to Redis (decisions in sync mode, sync rounds) that succeeded, through the circuit breaker.
		# TYPE edge_redis_successes_total counter
		edge_redis_successes_total 100
		# HELP edge_redis_timeouts_total Calls to Redis abandoned at their timeout (also counted in redis_errors_total).
		# TYPE edge_redis_timeouts_total counter
		edge_redis_timeouts_total 3
		# HELP edge_sync_ask_timeouts_total Async requests refused because AskWait ended before the fleet made room for them (a slow Redis, a loaded node): the fleet may have had the room. Should stay near 0; raise AskWait if it grows.
		# TYPE edge_sync_ask_timeouts_total counter
		edge_sync_ask_timeouts_total 31
		# HELP edge_sync_asks_total Async requests this node's share could not admit, for which it asked the fleet for room.
		# TYPE edge_sync_asks_total counter
		edge_sync_asks_total 22
		# HELP edge_sync_calls_total Async calls this node made: the other nodes holding a key were asked to give back what they spare.
		# TYPE edge_sync_calls_total counter
		edge_sync_calls_total 23
		# HELP edge_sync_keys_sent_total Key reports sent to Redis in successful sync rounds.
		# TYPE edge_sync_keys_sent_total counter
		edge_sync_keys_sent_total 5000
		# HELP edge_sync_last_round_duration_seconds Duration of the last sync round, in seconds.
		# TYPE edge_sync_last_round_duration_seconds gauge
		edge_sync_last_round_duration_seconds 0.0015
		# HELP edge_sync_leases Async keys whose share Redis granted this node under a live lease.
		# TYPE edge_sync_leases gauge
		edge_sync_leases 25
		# HELP edge_sync_lost_spend_total Spend (request weight) that will never reach Redis: dropped because the buffer of unreported spend was full, or because Redis refused its key. Should stay 0.
		# TYPE edge_sync_lost_spend_total counter
		edge_sync_lost_spend_total 17
		# HELP edge_sync_reports_deferred_total Async key reports due that waited for a later round (MaxReports a round).
		# TYPE edge_sync_reports_deferred_total counter
		edge_sync_reports_deferred_total 21
		# HELP edge_sync_resets_total Async keys another node reset, started afresh here.
		# TYPE edge_sync_resets_total counter
		edge_sync_resets_total 24
		# HELP edge_sync_pending_bytes Memory the spend waiting for Redis takes in Sync mode, as estimated against MaxPendingBytes.
		# TYPE edge_sync_pending_bytes gauge
		edge_sync_pending_bytes 4096
		# HELP edge_sync_pending_dropped_total Spend (request weight) dropped because the spend waiting for Redis reached MaxPendingBytes (also in sync_lost_spend_total). Should stay 0.
		# TYPE edge_sync_pending_dropped_total counter
		edge_sync_pending_dropped_total 5
		# HELP edge_sync_pending_keys Keys with spend Redis has not acknowledged yet.
		# TYPE edge_sync_pending_keys gauge
		edge_sync_pending_keys 9
		# HELP edge_sync_round_errors_total Sync rounds that failed (their spend is kept and sent again), refused by an open breaker included.
		# TYPE edge_sync_round_errors_total counter
		edge_sync_round_errors_total 12
		# HELP edge_sync_rounds_total Sync rounds run, failed ones included.
		# TYPE edge_sync_rounds_total counter
		edge_sync_rounds_total 1000
	`))
}

func TestNewLimiterCollectorPanicsOnNil(t *testing.T) {
	assert.Panics(t, func() { NewLimiterCollector(nil, "") })
}

func TestWatch(t *testing.T) {
	r, reg := newRecorder(t, Options{})
	require.Error(t, r.Watch(nil))
	l := newLimiter(t, hybrid.Config{})
	require.NoError(t, r.Watch(l))
	v, ok := value(t, reg, "rate_limit_mode", "mode", "local")
	require.True(t, ok)
	assert.Equal(t, 1.0, v)
	assert.Error(t, r.Watch(newLimiter(t, hybrid.Config{})), "one limiter per recorder: the names are taken")

	// A second limiter goes on a wrapped registerer.
	other := newLimiter(t, hybrid.Config{})
	_, err := other.Allow(bg, "k", hybrid.PerSecond(1))
	require.NoError(t, err)
	require.NoError(t, prometheus.WrapRegistererWith(prometheus.Labels{"limiter": "other"}, reg).Register(NewLimiterCollector(other, "second")))
	v, ok = value(t, reg, "second_keys_in_memory", "limiter", "other")
	require.True(t, ok)
	assert.Equal(t, 1.0, v)
}

// TestLimiterCollectorAsync watches an Async limiter on a private Redis,
// in a fleet of two: rounds, ops sent, asks and calls, the fleet, the
// breaker closed; then Redis dies and the limiter goes degraded, its
// breaker opens, errors count.
func TestLimiterCollectorAsync(t *testing.T) {
	srv := redistest.Start(t)
	r, reg := newRecorder(t, Options{})
	cfg := hybrid.Config{Redis: srv.Client(t, shortTimeouts), SyncInterval: 5 * time.Millisecond, BreakerOpenFor: time.Minute}
	l := newLimiter(t, cfg)
	require.NoError(t, r.Watch(l))
	// Another node: a node alone holds the whole of every limit, decides
	// every request in it and has nobody to ask, so it sends Redis nothing
	// but its heartbeat.
	cfg.Redis = srv.Client(t, shortTimeouts)
	other := newLimiter(t, cfg)
	metric := func(name string, labels ...string) float64 {
		v, ok := value(t, reg, name, labels...)
		require.True(t, ok, "%s%v", name, labels)
		return v
	}
	require.Eventually(t, func() bool {
		return metric("rate_limit_fleet_nodes") == 2 && other.Stats().Reconcile.Nodes == 2
	}, 5*time.Second, 5*time.Millisecond, "each node sees the other")
	for i := range 5 {
		// Each key is asked twice, its limit being 2: the node's even split
		// (1) cannot admit the second, so it asks the fleet for room, an op
		// sent to Redis (a key decided in the node's share costs Redis
		// nothing), and calls the other node, which holds the rest.
		for range 2 {
			_, err := l.Allow(bg, fmt.Sprintf("k%d", i), hybrid.PerHour(2))
			require.NoError(t, err)
		}
	}
	require.Eventually(t, func() bool {
		return metric("rate_limit_sync_keys_sent_total") >= 5 && metric("rate_limit_sync_rounds_total") >= 3
	}, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 1.0, metric("rate_limit_mode", "mode", "async"))
	assert.Equal(t, 2.0, metric("rate_limit_fleet_nodes"))
	assert.GreaterOrEqual(t, metric("rate_limit_sync_asks_total"), 5.0, "a request short of room on each key")
	assert.Positive(t, metric("rate_limit_sync_calls_total"), "the other node was asked to give back what it spares")
	assert.Equal(t, 1.0, metric("rate_limit_breaker_state", "state", "closed"))
	assert.Equal(t, 0.0, metric("rate_limit_breaker_state", "state", "open"))
	assert.Equal(t, 0.0, metric("rate_limit_degraded"))
	assert.Equal(t, 5.0, metric("rate_limit_keys_in_memory"))
	assert.Positive(t, metric("rate_limit_redis_successes_total"))
	assert.Zero(t, metric("rate_limit_redis_errors_total"))
	assert.Zero(t, metric("rate_limit_sync_lost_spend_total"))
	assert.Zero(t, metric("rate_limit_sync_round_errors_total"))
	assert.Positive(t, metric("rate_limit_sync_last_round_duration_seconds"))
	assert.Contains(t, families(t, reg), "rate_limit_clock_offset_seconds")

	srv.Kill()
	require.Eventually(t, func() bool {
		return metric("rate_limit_degraded") == 1 && metric("rate_limit_breaker_state", "state", "open") == 1
	}, 10*time.Second, 10*time.Millisecond)
	assert.Positive(t, metric("rate_limit_redis_errors_total"))
	assert.Positive(t, metric("rate_limit_sync_round_errors_total"))
	assert.GreaterOrEqual(t, metric("rate_limit_breaker_transitions_total"), 1.0)
	assert.Zero(t, metric("rate_limit_breaker_state", "state", "closed"))
}

// TestObserveRoundHooksAReconciler runs a real reconciler with the
// Recorder as its OnRound hook, the way hybrid would wire it: a round that
// reaches Redis, one that fails, one the open breaker refuses.
func TestObserveRoundHooksAReconciler(t *testing.T) {
	srv := redistest.Start(t)
	rec, reg := newRecorder(t, Options{})
	engine, err := local.New(local.Config{TrackSpend: true, KeepOrphans: true, SpendDue: true})
	require.NoError(t, err)
	store, err := remote.New(srv.Client(t, shortTimeouts), remote.Options{Node: "me"})
	require.NoError(t, err)
	b := breaker.New(breaker.Settings{Timeout: time.Second, OpenFor: time.Minute, Failures: 1})
	rc, err := reports.New(reports.Config{OnRound: rec.ObserveRound},
		reports.Deps{Engine: engine, Store: store, Breaker: b, Clock: clock.Real{}, Offset: clock.NewOffset(time.Now())})
	require.NoError(t, err)

	for _, k := range []string{"a", "b", "c"} {
		_, err := engine.AllowN(time.Now().UnixNano(), k, limit.PerSecond(2), 1) // half the burst: due
		require.NoError(t, err)
	}
	require.NoError(t, rc.Round(bg))
	srv.Kill()
	require.Error(t, rc.Round(bg)) // fails, and opens the breaker
	require.ErrorIs(t, rc.Round(bg), breaker.ErrOpen)

	for _, res := range []string{"ok", "error", "refused"} {
		n, ok := value(t, reg, "rate_limit_sync_round_duration_seconds", "result", res)
		require.True(t, ok, res)
		assert.Equal(t, 1.0, n, res)
	}
	mf := families(t, reg)["rate_limit_sync_round_keys"]
	require.NotNil(t, mf)
	for _, m := range mf.Metric {
		if hasLabels(m, []string{"result", "ok"}) {
			assert.Equal(t, 3.0, m.Histogram.GetSampleSum(), "three keys reported")
		}
	}
}

// TestConcurrentScrapesOfALiveLimiter scrapes a Recorder and a busy
// limiter's collector from many goroutines at once (run it with -race).
func TestConcurrentScrapesOfALiveLimiter(t *testing.T) {
	r, reg := newRecorder(t, Options{})
	l := newLimiter(t, hybrid.Config{})
	require.NoError(t, r.Watch(l))
	// Nothing refills during the test, however long a loaded machine makes
	// it: a full bucket would be forgotten by the limiter's janitor.
	lim := hybrid.Per(5, time.Hour)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				start := time.Now()
				d, err := l.Allow(bg, fmt.Sprintf("k%d", i%20), lim)
				if !assert.NoError(t, err) {
					return
				}
				r.ObserveCheck(middlewareCheck("global", d, time.Since(start)))
				r.ObserveRequest(middlewareRequest(d, "global", fmt.Sprintf("client-%d-%d", g, i%20)))
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 50 {
				_, err := reg.Gather()
				if !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	v, _ := value(t, reg, "rate_limit_keys_in_memory")
	assert.Equal(t, 20.0, v)
	allowed, _ := value(t, reg, "rate_limit_checks_total", "rule", "global", "source", "local", "result", "allowed")
	limited, _ := value(t, reg, "rate_limit_checks_total", "rule", "global", "source", "local", "result", "limited")
	assert.Equal(t, 8*500.0, allowed+limited)
	exceeded, _ := value(t, reg, "rate_limit_exceeded_total", "rule", "global")
	assert.Equal(t, limited, exceeded)
}

// middlewareCheck is the event a middleware reports for one check.
func middlewareCheck(rule string, d hybrid.Decision, latency time.Duration) observe.CheckEvent {
	return observe.CheckEvent{Rule: rule, Decision: d, Latency: latency}
}

// middlewareRequest is the event a middleware reports for a request
// decided by d alone.
func middlewareRequest(d hybrid.Decision, rule, client string) observe.RequestEvent {
	if d.Allowed {
		return observe.RequestEvent{Outcome: observe.Passed, Client: client}
	}
	return observe.RequestEvent{Outcome: observe.Limited, Rule: rule, Client: client}
}
