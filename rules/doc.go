// Package rules is the rate-limit rules engine's configuration and
// matching: which limits apply to a request, in which order, under which
// keys. It reads the rules from YAML or the environment, validates them with
// every error named by line (or variable) and field, compiles them into
// immutable Rules, plans the checks of each request, backs off repeat
// offenders (Penalty), and reloads the file when it changes (Watcher).
//
// It decides nothing itself: a limiter (package local, or the hybrid one)
// runs the Checks Plan returns.
//
// # The YAML file
//
//	rate_limits:
//	  enabled: true            # default true
//	  shadow: false            # global shadow mode: decide and count, never block
//	  default:                 # any request no endpoint rule matches
//	    requests: 100
//	    window: 60             # seconds (decimals allowed), or a Go duration string "1m"
//	    algorithm: sliding_window_counter   # any name limit.ParseAlgorithm accepts; default token_bucket
//	    burst: 20              # optional, positive; buckets only: an error on a window algorithm
//	    shadow: false          # per-rule shadow
//	  global: {requests: 10000, window: 1}   # one limit across all clients
//	  per_ip: {requests: 100, window: 60}    # per client IP
//	  per_user: {requests: 1000, window: 60} # per authenticated user
//	  endpoints:               # per client
//	    /api/v1/search: {requests: 30, window: 60, algorithm: token_bucket, burst: 10}
//	    "POST /api/v1/upload": {requests: 10, window: 3600, algorithm: sliding_window_log}
//	    "/api/v1/items/*": {requests: 50, window: 60}   # the subtree, and /api/v1/items itself
//	  tiers:                   # per client
//	    free: {requests: 100, window: 3600}
//	    premium: {requests: 10000, window: 3600}
//	  ban: [203.0.113.0/24, 2001:db8::1]   # addresses and CIDRs, v4 and v6
//	  penalty: {strikes: 3, within: 60, base: 10, max: 3600}
//	  priority: {reserve: 0.2}  # fraction of every limit normal traffic may not use
//
// A window may also be a calendar unit, day, week (Monday to Monday), month
// or year, with an optional zone (an IANA name; UTC by default): a quota
// aligned to the calendar there, fixed_window unless the rule names
// sliding_window_counter, the only other algorithm with calendar windows:
//
//	tiers:
//	  free: {requests: 10000, window: month, zone: Europe/Paris}   # from the 1st, midnight Paris time
//
// Every block but rate_limits is optional, and a null value reads as absent.
// A rule needs requests and window. Unknown fields, duplicate keys, YAML
// merge keys, and an empty file are errors. Every error names its line,
// column and field path, as in
//
//	rules: line 7, column 17: rate_limits.endpoints./api/v1/search.requests: must be positive, got -5
//
// and all of them are reported at once (up to MaxErrors).
//
// # The environment
//
// RATE_LIMIT_ENABLED, RATE_LIMIT_ALGORITHM, RATE_LIMIT_DEFAULT,
// RATE_LIMIT_WINDOW, RATE_LIMIT_PER_IP, RATE_LIMIT_PER_USER and
// RATE_LIMIT_BURST (see the Env constants) configure the default, per_ip and
// per_user rules. FromEnv builds a Config from them alone; ApplyEnv overlays
// them on a file's. Precedence, highest first, field by field:
//
//  1. an environment variable that is set and not empty;
//  2. the file (or a Config built in code);
//  3. the built-in defaults: enabled, token_bucket, burst equal to requests.
//
// RATE_LIMIT_WINDOW and RATE_LIMIT_ALGORITHM apply to the default rule and to
// per_ip and per_user when their own variable is set; a per_ip or per_user
// rule the environment creates takes the default rule's window and
// algorithm. RATE_LIMIT_BURST is the default rule's burst, for the bucket
// algorithms only: with a window algorithm it is ignored, since those have
// no burst. Load and WatchOptions.Env apply this precedence on every load.
//
// # Evaluation
//
// Plan checks from the widest rule to the narrowest: IP ban, then global,
// per_ip, per_user, tier, and endpoint (the best matching endpoint rule, or
// the default rule). The cheapest and widest check comes first, so a flood
// is turned away before it spends per-client state. A banned request gets
// no checks.
//
// Endpoint matching: an exact path beats a subtree pattern ("/a/*"), a
// longer subtree beats a shorter one, and for the same pattern path a
// method's own rule ("POST /a") beats the any-method one ("/a"). Methods
// compare case-insensitively; paths exactly.
//
// # Keys
//
// A Check's Key is its rule's name, with '%' and '|' escaped as %25 and %7C,
// then '|', then the identity: "per_ip|203.0.113.7", "tier:free|user:42",
// "endpoint:POST /api/v1/upload|key:abc". The global rule's key is its name
// alone, "global". Rule names are distinct and the first '|' ends the name,
// so two different (rule, identity) pairs never share a key, whatever the
// identity holds.
//
// # Priority reserve
//
// With priority.reserve r, a non-priority request first passes a
// "reserve:<rule>" check on its own key ("reserve:tier:free|user:42"), whose
// limit is the rule's scaled by 1−r (rate and burst, rounded down, at least
// 1), then the rule's own check. A priority request skips the reserve checks.
// Every request passes the rule's own check, so together they never exceed
// the rule's limit; normal requests also pass the reserve check, so they
// never use more than 1−r of it; so at least r of the limit is always left
// for priority traffic. (When the scaled rate rounds up to 1, the guarantee
// is the limit less 1.) The middleware runs a request's checks in order and
// stops at the first that denies, so a denied request has spent the checks
// before it (as in Envoy's rate-limit service): the reserve key may count a
// normal request a later check denied, which can only leave priority traffic
// more than its share, never less.
//
// # Reload
//
// Watch loads a file and keeps its Rules current: each change is parsed and
// compiled first and swapped in atomically if valid; an invalid file keeps
// the current Rules and is reported, with its lines, through OnError.
// Readers load the current Rules once per request from Watcher.Current.
package rules
