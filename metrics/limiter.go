package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// limiterCollector exports a limiter's Stats, read at scrape time.
type limiterCollector struct {
	stats func() hybrid.Stats

	mode, degraded, keys, evictions                       *prometheus.Desc
	breakerState, transitions                             *prometheus.Desc
	redisSuccesses, redisErrors, redisTimeouts, rejected  *prometheus.Desc
	rounds, roundErrors, keysSent, lost, pending, lastDur *prometheus.Desc
	pendingDropped, pendingBytes                          *prometheus.Desc
	nodes, offset                                         *prometheus.Desc
	faults, decisionCalls, heavyRefused, askTimeouts      *prometheus.Desc
	deferred, asks, calls, resets, leases                 *prometheus.Desc
}

// NewLimiterCollector returns a prometheus.Collector of l's Stats, read
// when the registry is scraped: breaker state and transitions, Redis calls,
// successes, errors, timeouts and refusals, degraded mode, keys in memory, sync
// rounds, round errors, keys sent, spend lost, pending keys, pending spend
// dropped at MaxPendingBytes and its bytes, the last
// round's duration, fleet nodes and clock offset, the quieter faults (an
// evicting or unreadable eviction policy, keys of another type, clock steps,
// state Redis lost, eviction records forgotten), heavy requests refused
// while degraded, Async's share protocol (asks, calls, reports
// deferred, resets applied, leases held), and the decision path's calls to
// Redis by breaker state. Metric names start with
// namespace ("" means DefaultNamespace). A LocalOnly limiter has no breaker,
// Redis or rounds: it exports mode, degraded and keys only.
//
// Each scrape calls l.Stats once, which takes each of the limiter's shard
// locks briefly to count keys. Concurrent scrapes are safe. Register it
// once per limiter (Recorder.Watch does); it panics if l is nil.
func NewLimiterCollector(l *hybrid.Limiter, namespace string) prometheus.Collector {
	if l == nil {
		panic("metrics: NewLimiterCollector: nil limiter")
	}
	return newLimiterCollector(l.Stats, namespace)
}

// newLimiterCollector is NewLimiterCollector reading stats from any source.
func newLimiterCollector(stats func() hybrid.Stats, namespace string) *limiterCollector {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	return &limiterCollector{
		stats:    stats,
		mode:     desc("mode", "The mode the limiter runs in (async, sync or local): 1 for its mode.", "mode"),
		degraded: desc("degraded", "1 while the limiter decides under its fallback because Redis failed, else 0."),
		keys:     desc("keys_in_memory", "Keys the limiter holds in node memory."),
		evictions: desc("keys_evicted_total",
			"Keys evicted from node memory, least recently used first, to hold the bound on keys (MaxKeys): an evicted key that comes back starts as spent as it was."),
		breakerState: desc("breaker_state",
			"The Redis circuit breaker's state: 1 for the current state (closed, half-open or open), 0 for the others.", "state"),
		transitions: desc("breaker_transitions_total", "State transitions of the Redis circuit breaker."),
		redisSuccesses: desc("redis_successes_total",
			"Calls to Redis (decisions in sync mode, sync rounds) that succeeded, through the circuit breaker."),
		redisErrors: desc("redis_errors_total",
			"Calls to Redis that failed, through the circuit breaker: connection and Redis errors, timeouts, and calls refused because too many were in flight. Should stay 0."),
		redisTimeouts: desc("redis_timeouts_total", "Calls to Redis abandoned at their timeout (also counted in redis_errors_total)."),
		rejected:      desc("breaker_rejected_total", "Calls to Redis the breaker refused without making them: it was open, or too many calls were in flight."),
		rounds:        desc("sync_rounds_total", "Sync rounds run, failed ones included."),
		roundErrors:   desc("sync_round_errors_total", "Sync rounds that failed (their spend is kept and sent again), refused by an open breaker included."),
		keysSent:      desc("sync_keys_sent_total", "Key reports sent to Redis in successful sync rounds."),
		lost: desc("sync_lost_spend_total",
			"Spend (request weight) that will never reach Redis: dropped because the buffer of unreported spend was full, or because Redis refused its key. Should stay 0."),
		pending: desc("sync_pending_keys", "Keys with spend Redis has not acknowledged yet."),
		pendingDropped: desc("sync_pending_dropped_total",
			"Spend (request weight) dropped because the spend waiting for Redis reached MaxPendingBytes (also in sync_lost_spend_total). Should stay 0."),
		pendingBytes: desc("sync_pending_bytes", "Memory the spend waiting for Redis takes in Sync mode, as estimated against MaxPendingBytes."),
		lastDur:      desc("sync_last_round_duration_seconds", "Duration of the last sync round, in seconds."),
		nodes:        desc("fleet_nodes", "Nodes active in the fleet, as Redis reported at the last successful round."),
		offset:       desc("clock_offset_seconds", "Offset applied to this node's clock to align it with Redis server time, in seconds."),
		faults: desc("faults_total",
			"Faults that change decisions without stopping Redis, each logged: an eviction policy that can evict the limiter's keys, or that could not be read (at start), decisions and reports on a key of another type (made under the fallback), clock steps (corrected), a key's state Redis lost while this node had spent on it (restored), evicted keys whose record was forgotten (they may come back fresher), keys Redis evicted (any of them may have been the limiter's). Should stay 0.", "fault"),
		heavyRefused: desc("heavy_refused_total",
			"Requests refused while degraded (or on a key Redis refuses) because they weigh more than this node's share of their limit: every node deciding alone could admit one at once."),
		askTimeouts: desc("sync_ask_timeouts_total",
			"Async requests refused because AskWait ended before the fleet made room for them (a slow Redis, a loaded node): the fleet may have had the room. Should stay near 0; raise AskWait if it grows."),
		deferred: desc("sync_reports_deferred_total", "Async key reports due that waited for a later round (MaxReports a round)."),
		asks:     desc("sync_asks_total", "Async requests this node's share could not admit, for which it asked the fleet for room."),
		calls:    desc("sync_calls_total", "Async calls this node made: the other nodes holding a key were asked to give back what they spare."),
		resets:   desc("sync_resets_total", "Async keys another node reset, started afresh here."),
		leases:   desc("sync_leases", "Async keys whose share Redis granted this node under a live lease."),
		decisionCalls: desc("decision_redis_calls_total",
			"Calls to Redis made to decide (sync mode), by the breaker state that let them through: closed, half-open (a probe), or open (never: while the breaker is open no decision waits on Redis).", "breaker"),
	}
}

// Describe implements prometheus.Collector.
func (c *limiterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.mode, c.degraded, c.keys, c.evictions, c.breakerState, c.transitions, c.redisSuccesses, c.redisErrors, c.redisTimeouts,
		c.rejected, c.rounds, c.roundErrors, c.keysSent, c.lost, c.pending, c.pendingDropped, c.pendingBytes, c.lastDur, c.nodes, c.offset,
		c.faults, c.decisionCalls, c.heavyRefused, c.askTimeouts, c.deferred, c.asks, c.calls, c.resets, c.leases,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *limiterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(c.mode, 1, s.Mode.String())
	gauge(c.degraded, boolValue(s.Degraded))
	gauge(c.keys, float64(s.Keys))
	counter(c.evictions, s.Evictions)
	if s.Mode == hybrid.LocalOnly {
		return
	}
	for _, st := range []breaker.State{breaker.Closed, breaker.HalfOpen, breaker.Open} {
		gauge(c.breakerState, boolValue(s.Breaker == st), st.String())
	}
	b := s.BreakerCounts
	counter(c.transitions, b.Changes)
	counter(c.redisSuccesses, b.Successes)
	counter(c.redisErrors, b.Failures)
	counter(c.redisTimeouts, b.Timeouts)
	counter(c.rejected, b.Rejected)
	rc := s.Reconcile
	counter(c.rounds, rc.Rounds)
	counter(c.roundErrors, rc.RoundErrors)
	counter(c.keysSent, rc.KeysSent)
	counter(c.lost, rc.LostSpend)
	gauge(c.pending, float64(rc.Pending))
	counter(c.pendingDropped, rc.PendingDropped)
	gauge(c.pendingBytes, float64(rc.PendingBytes))
	gauge(c.lastDur, rc.LastRound.Seconds())
	gauge(c.nodes, float64(rc.Nodes))
	gauge(c.offset, s.ClockOffset.Seconds())
	f := s.Faults
	counter(c.faults, f.EvictingPolicy, "evicting_policy")
	counter(c.faults, f.UncheckedPolicy, "unchecked_policy")
	counter(c.faults, f.KeyFaults+rc.KeyFaults, "key_of_another_type")
	counter(c.faults, f.ClockSteps, "clock_step")
	counter(c.faults, s.StateLost, "state_lost")
	counter(c.faults, s.EvictionsForgotten, "eviction_forgotten")
	counter(c.faults, f.Evictions, "redis_evicted_keys")
	counter(c.heavyRefused, s.HeavyRefused)
	counter(c.askTimeouts, s.AskTimeouts)
	counter(c.deferred, rc.Deferred)
	counter(c.asks, rc.Shares.Asks)
	counter(c.calls, rc.Shares.Calls)
	counter(c.resets, rc.Shares.Resets)
	gauge(c.leases, float64(rc.Leases))
	dc := s.DecisionCalls
	counter(c.decisionCalls, dc.Closed, breaker.Closed.String())
	counter(c.decisionCalls, dc.Probes, breaker.HalfOpen.String())
	counter(c.decisionCalls, dc.Open, breaker.Open.String())
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
