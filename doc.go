// Package hybridlimit is a rate limiter for services that run on many nodes:
// every node decides from memory in well under a microsecond, reconciles with
// Redis in the background on Redis server TIME, and falls back to conservative
// local limits through a circuit breaker when Redis is slow or gone.
//
// This package holds only documentation; the code lives in its subpackages,
// each with one job, importing only downward:
//
//   - limit: what a limit is (rate, period, burst, algorithm) and the result
//     of a decision.
//   - clock: time as a parameter: the real clock, a manual clock for tests,
//     and the offset from this node's clock to Redis server TIME.
//   - local: sharded in-memory state for many keys, every algorithm as pure
//     state and integer math, and the spend accounting a reconciler takes.
//
// Start with package local for a limiter inside one process.
package hybridlimit
