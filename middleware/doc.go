// Package middleware rate-limits net/http handlers with a hybrid.Limiter
// and the rules of package rules: New returns a plain
// func(http.Handler) http.Handler.
//
// # Evaluation
//
// For each request the middleware, in order:
//
//  1. loads the Rules in force (Config.Rules: a Watcher's Current, or
//     rules.Static); disabled rules let every request through unchecked;
//  2. finds the client: its key from Config.Client (an httpkey.Extractor:
//     address, API key, user, or several at once), its address from
//     Config.IP (forwarding headers believed from trusted proxies only),
//     and the user, tier, priority and cost from the optional Config
//     functions;
//  3. plans the request's checks (rules.Rules.Plan), with the URL path
//     cleaned by path.Clean so that "/api//v1/./search" cannot sidestep the
//     rule for "/api/v1/search";
//  4. answers 403 Forbidden to a banned address;
//  5. answers 403 Forbidden, with Retry-After, to a client the rules'
//     penalty blocks (rules.Penalty: repeat offenders back off
//     exponentially);
//  6. runs the checks in the plan's order (global, per_ip, per_user, tier,
//     endpoint or default, each preceded by its priority reserve check for
//     normal traffic), spending the request's cost on each, and stops at the
//     first check that denies it and is not a shadow check: 429 Too Many
//     Requests, and a strike for the penalty; or 503 Service Unavailable if
//     the denial is the limiter failing closed while Redis is down. Checks
//     after the denying one are not spent; the ones before it are;
//  7. otherwise sets the rate-limit headers and calls the next handler.
//
// Every answer the middleware writes itself is JSON. A 429 reads
//
//	{"error":"rate_limit_exceeded","message":"Too many requests. Please retry after 30 seconds.","retry_after":30}
//
// with Retry-After: 30. Retry-After is whole seconds, rounded up, at least 1,
// and is sent on every 429 and 503 and on a penalty's 403, whatever
// Config.Headers says.
//
// Config.OnDenied replaces these answers to denied requests with a
// service's own (ulule/limiter's LimitReachedHandler): it gets a Denial
// saying what happened, which check denied the request and with what
// decision, and writes the status and body, the headers being already set.
// DefaultOnDenied is the default answer.
//
// # Headers
//
// Config.Headers chooses the families: the de facto X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset, the IETF RateLimit-Policy and
// RateLimit fields, both (the default) or none. They describe, on a response
// the handler wrote, the most restrictive check of the request (the one with
// the least Remaining relative to its limit's Capacity; the earliest on a
// tie) and, on a 429, the check that denied it:
//
//	X-RateLimit-Limit: 100          the check's requests per window, as its rule wrote them
//	X-RateLimit-Remaining: 42       its Remaining after this request
//	X-RateLimit-Reset: 1800000030   Unix seconds, rounded up, when the key is back to fresh
//	RateLimit-Policy: "global";q=10000;w=1, "per_ip";q=100;w=60
//	RateLimit: "per_ip";r=42;t=30
//
// X-RateLimit-Reset counts from the limiter's clock (hybrid.Limiter.Now,
// aligned to Redis server time), so every node of a fleet announces the same
// instant.
//
// The IETF fields follow draft-ietf-httpapi-ratelimit-headers-11 (23 May
// 2026), whose fields are Structured Field Lists (RFC 9651):
//
//   - RateLimit-Policy lists the policy of every check of the request, named
//     by its rule (rules.Check.Rule, as an sf-string): q and w are the limit
//     as the rule wrote it, its requests and its window, whatever the
//     algorithm (PolicyQuota). A bucket's burst is not the quota: the rule
//     {requests: 3, window: 60, burst: 2} announces q=3;w=60, and the burst
//     shows in RateLimit's r, which never exceeds it. A calendar quota's w
//     is the length of the day, week, month or year the request falls in.
//     w is in whole seconds, rounded up, at least 1: the draft has no
//     sub-second windows, so a sub-second limit announces more time than it
//     takes. No partition key (pk) is sent: the client keys may hold API
//     keys and user ids.
//   - RateLimit describes the check the X-RateLimit fields describe: r is
//     its Remaining, and t its effective window in whole seconds, rounded
//     up: the time until the key is fresh again on an admitted request, and
//     the Retry-After on a 429, the time within which the client can use
//     nothing (r=0), so that Retry-After never points earlier than the end
//     of the effective window (the draft's section 6).
//
// Integers are capped at 999,999,999,999,999, the largest sf-integer; bytes
// of a rule name outside printable ASCII, which an sf-string cannot hold, are
// written as %XX.
//
// Shadow checks never appear in the headers: a limit on trial must not
// change what clients do. Nor do headers appear on the 403, 503 and error
// answers, whose state says nothing useful about the limits.
//
// # Shadow mode
//
// A shadow check (a rule's shadow flag, or the rules' global one) decides
// and counts like any other but never blocks: when one would have denied a
// request that nothing else denied, the request passes with Outcome
// ShadowLimited, naming the first such rule. Under global shadow mode
// (rules.Rules.Shadow) nothing blocks at all, as the rules package
// documents for bans: a banned address or a client under a penalty block
// passes with Outcome ShadowLimited and RequestEvent.Rule RuleBan or
// RulePenalty, unchecked, as it would have been turned away unchecked.
//
// Strikes: a request a live check limits strikes the client. Under global
// shadow mode a request a check would have limited strikes too, so that the
// penalty's shadow blocks show what production would do; a rule's own
// shadow flag never strikes, since the penalty it would feed is live. The
// penalty under global shadow mode is never the live one: switching shadow
// mode off starts every client afresh.
//
// # Errors
//
// When the client's key cannot be found (httpkey.ErrNoKey: end the
// extractor with a source that always has a key, such as httpkey.IP), is
// malformed (httpkey.ErrMalformed), the address cannot be read, the cost is
// negative, or the limiter refuses a check (an invalid limit, a cost above a
// limit's capacity: a caller's error, never Redis's), the middleware calls
// Config.OnError, whose default answers 400 for a malformed key and 500
// otherwise, with a JSON body that does not echo the error. The request's
// Outcome is Failed. The middleware never panics on a request. An error on a
// shadow check is logged and the check skipped: shadow checks never block.
//
// # Cost
//
// On an admitted request the middleware allocates what rules.Plan and the
// extractor allocate (a string per check key, the client key), one string
// holding every header value and one slice of them; the checks and
// decisions live in pooled slices: 5 allocations with the global, per_ip and
// default rules keyed by address (TestHotPathAllocations, and
// BenchmarkMiddleware for the time).
package middleware
