// Package hybridlimit is a rate limiter for services that run on many nodes:
// every node decides from memory in well under a microsecond, reconciles with
// Redis in the background on Redis server TIME, and falls back to conservative
// local limits through a circuit breaker when Redis is slow or gone, without
// losing what was spent.
//
// This package holds the documentation, the runnable example
// (Example_twoNodes: two nodes sharing a limit through Redis) and the
// module's whole-system suites; the code lives in its subpackages, each with
// one job. From the bottom up, each importing only the packages of its own
// line and of those before it (TestPackageMap holds this list to the code):
//
//   - intmath: the integer arithmetic memory and Redis share, so both decide
//     alike.
//   - limit: what a limit is (rate, period, burst, algorithm, calendar) and
//     the result of a decision.
//   - clock: time as a parameter: the real clock, a manual clock for tests,
//     and the offset from this node's clock to Redis server TIME.
//   - share: Async mode's share protocol: the messages between a node and
//     Redis, and the arithmetic of shares.
//   - local: sharded in-memory state for many keys, every algorithm as pure
//     state and integer math, each key's share, and the spend a reconciler
//     takes.
//   - remote: the Redis side: one Lua script per algorithm on server TIME,
//     Async mode's share and registry scripts, and Sync mode's batched,
//     idempotent spend reports.
//   - breaker: the circuit breaker (sony/gobreaker) around every Redis call,
//     with a deadline of its own.
//   - sync/protocol, sync/round, sync/async, sync/reports: the
//     reconciliation, in the background: Async mode's share protocol as a
//     state machine without I/O (protocol), the round skeleton both
//     runners share (round), the runner that plays the protocol against
//     Redis (async), and Sync mode's spend reports (reports).
//   - hybrid: the limiter a service uses, in Async, Sync or LocalOnly mode.
//   - observe, httpkey, rules, middleware, grpclimit: the events the
//     request limiters report, who a client is, which limits apply to it,
//     and net/http and gRPC servers in front of the limiter.
//   - envoyrls/config, envoyrls: envoyproxy/ratelimit's configuration, and
//     Envoy's rate limit service on it.
//   - metrics: Prometheus metrics of the limiter and of the request
//     limiters.
//   - upstream: a reverse proxy to one upstream with timeouts, a body limit
//     and a circuit breaker, for the gateway.
//   - accesslog, replay: HTTP access logs read and merged in time order,
//     and replayed through rules files: what would have been limited.
//   - internal/...: kits for the tests, the benchmarks and the command line:
//     private Redis servers, a fault proxy, fleets driven with load, the
//     fleet checker and the deterministic simulation of Async mode.
//   - cmd/hybridlimit: the command line (demo, tune, chaos, gateway, rls,
//     lint, version).
//   - hybridlimit: this package.
//
// Start with package hybrid; cmd/hybridlimit shows it working, and docs/
// explains the accuracy model, the Redis side, the gateway and every
// measured number. docs/architecture.md is the map for whoever changes the
// code.
package hybridlimit
