// Package metrics exports a hybridlimit deployment's behaviour as Prometheus
// metrics, on a registry the caller passes in (never the global one).
//
// Two sources feed it:
//
//   - A Recorder counts events as they happen. It implements
//     observe.Observer (every check and every request the middleware
//     handles: results by rule and by source, check latency, near-limit
//     checks, the most limited clients), and its ObserveRound method is a
//     hybrid.Config.OnRound hook (the duration and size of every sync
//     round).
//   - A limiter collector (NewLimiterCollector, or Recorder.Watch) reads
//     hybrid.Limiter.Stats at scrape time: breaker state and transitions,
//     Redis calls and errors, degraded mode, keys in memory, sync rounds,
//     keys sent, spend lost, pending keys, fleet nodes, clock offset.
//
// Typical wiring:
//
//	reg := prometheus.NewRegistry()
//	rec, err := metrics.New(reg, metrics.Options{})
//	...
//	lim, err := hybrid.New(hybrid.Config{Redis: rdb, OnRound: rec.ObserveRound})
//	...
//	if err := rec.Watch(lim); err != nil { ... }
//	// pass rec to the middleware as its Observer
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// # Names
//
// Every name starts with Options.Namespace, "rate_limit" by default, so the
// queries rate-limiting dashboards commonly use work as written:
// rate_limit_requests_total, rate_limit_exceeded_total. Otherwise the names
// follow Prometheus conventions: durations in seconds
// (rate_limit_check_duration_seconds, not rate_limit_latency_ms), counters
// end in _total. docs/metrics.md
// lists every metric, its labels, and alerts; docs/grafana-dashboard.json is
// a dashboard of them.
//
// # Cardinality
//
// Every label has a bounded set of values. result, source, state and mode
// are fixed enumerations. rule takes the names of the configured rules, at
// most Options.MaxRules of them; any further rule is counted under
// OverflowRule. client_id, on rate_limit_client_exceeded_total only, is
// held for at most Options.TopClients clients: a least-recently-limited
// client is evicted, and its series deleted, when a new one arrives. No
// label ever holds a limiter key.
//
// # Privacy
//
// client_id values are hashed by default (Options.ClientLabel,
// Options.ClientLabelKey): client addresses and API keys never reach
// Prometheus unless PlainClientLabel asks for them.
//
// # Several limiters
//
// The names are fixed per namespace, so a second Recorder, or a second
// limiter collector, on the same registry fails to register. Give each its
// own labels with prometheus.WrapRegistererWith (for example
// {"limiter": "api"}), or its own Namespace.
package metrics
