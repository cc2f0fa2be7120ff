// Package hybrid is the public limiter: node memory (package local) for
// decisions in well under a microsecond, Redis (package remote) for the
// fleet's shared state, the reconciliation (packages sync/async and sync/reports) between them, and
// a circuit breaker (package breaker) that moves the node to conservative
// local limits while Redis is slow or gone, and back when it returns,
// without losing what was spent.
//
// One setting, [Config.Mode], chooses the trade-off: [Async] (the default)
// decides from memory and reconciles every SyncInterval; [Sync] decides in
// Redis, exactly; [LocalOnly] never touches Redis. Whatever the mode, Redis
// trouble is never an error of [Limiter.Allow]: it is a [Decision] whose
// Source is [Degraded].
//
// # Limits, decisions and results
//
// The limit a key is decided under and the result of a decision are package
// limit's types, so that this package, the rules engine, the middleware and
// the Envoy service pass one and the same value: [Limit] is an alias of
// [limit.Limit], and a [Decision] embeds a [limit.Result] beside its
// Source. They stay aliases and embeddings rather than types of their own
// here, so that no conversion sits between a rule and a decision; but go doc
// follows neither into package limit, so the documentation of [Limit] and of
// [Decision] below lists their methods and fields, each linked to its full
// description (go doc ./limit Limit.WithBurst, go doc ./limit Result).
package hybrid
