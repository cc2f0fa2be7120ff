// Package hybridlimit is a rate limiter for services that run on many nodes:
// every node decides from memory in well under a microsecond, reconciles with
// Redis in the background on Redis server TIME, and falls back to conservative
// local limits through a circuit breaker when Redis is slow or gone, without
// losing what was spent.
//
// This package holds only documentation and the module's chaos and failover
// suites; the code lives in its subpackages, each with one job, importing
// only downward:
//
//   - limit: what a limit is (rate, period, burst, algorithm) and the result
//     of a decision.
//   - clock: time as a parameter: the real clock, a manual clock for tests,
//     and the offset from this node's clock to Redis server TIME.
//   - local: sharded in-memory state for many keys, every algorithm as pure
//     state and integer math, and the spend accounting a reconciler takes.
//   - remote: the Redis side: one Lua script per algorithm on server TIME,
//     and the batched, idempotent reconciliation of a node's spend.
//   - breaker: the circuit breaker (sony/gobreaker) around every Redis call,
//     with a deadline of its own.
//   - sync (imported as reconcile): the background rounds that report spend
//     and hand each node its share of the global remainder.
//   - hybrid: the limiter a service uses, in Async, Sync or LocalOnly mode.
//   - httpkey, rules, middleware, grpclimit, envoyrls, metrics: who a
//     client is, which limits apply to it, net/http and gRPC servers and
//     Envoy's rate limit service in front of the limiter, and Prometheus
//     metrics; observe holds the events the three report.
//   - upstream: a reverse proxy to one upstream with timeouts, a body limit
//     and a circuit breaker, for the gateway.
//
// Start with package hybrid (Example_twoNodes here shows two nodes sharing
// a limit through Redis); cmd/hybridlimit shows it working (demo, tune, chaos, gateway,
// lint), and docs/ explains the accuracy model, the Redis side, the gateway
// and every measured number. docs/architecture.md is the map for whoever
// changes the code.
package hybridlimit
