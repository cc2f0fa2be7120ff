package rules

import (
	"net/netip"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Config is the rate-limit rules as written: the rate_limits block of a YAML
// file (Parse, ParseFile), the environment (FromEnv, ApplyEnv), or a literal
// in code. It is plain data; Compile validates it and builds the Rules a
// request is planned against, so a Config may be changed freely until then.
//
// The zero Config is valid: enabled, not shadowed, and without rules, so it
// plans no checks. A Config is not safe for concurrent mutation.
type Config struct {
	// Disabled turns every rule off: Plan reports no ban and no checks. It is
	// the negation of YAML's enabled (default true), so that the zero Config
	// is enabled.
	Disabled bool
	// Shadow makes every check a shadow check: decide and count, never
	// block. It ORs with each rule's own Shadow.
	Shadow bool

	// Default applies to a request no endpoint rule matches. Nil: such a
	// request has no endpoint-level check.
	Default *Rule
	// Global is one limit shared by every client. Nil: none.
	Global *Rule
	// PerIP limits each client IP. Nil: none.
	PerIP *Rule
	// PerUser limits each authenticated user. Nil: none.
	PerUser *Rule

	// Endpoints maps an endpoint pattern to its rule, per client. A pattern
	// is "PATH" (any method) or "METHOD PATH"; a PATH ending in "/*" matches
	// its subtree. See Rules.Plan for which pattern wins.
	Endpoints map[string]Rule
	// Tiers maps a client tier ("free", "premium", ...) to its rule, per
	// client.
	Tiers map[string]Rule

	// Ban lists the banned client addresses and networks. A single address
	// is a /32 or /128 prefix.
	Ban []netip.Prefix

	// Penalty backs off repeat offenders. Nil: no penalty.
	Penalty *PenaltyConfig

	// Reserve is the fraction of every limit, in [0, 1), that normal traffic
	// may not use, so that priority traffic always finds it. YAML:
	// priority.reserve. Zero: no reserve checks.
	Reserve float64

	reserveAt origin
}

// Rule is one rate limit of the configuration: Requests per Window, enforced
// by Algorithm, with an optional Burst, and a Shadow flag. Rule.Limit gives
// the limit.Limit it stands for.
//
// The zero Rule is invalid (no requests, no window). A Rule is a small value;
// copy it freely.
type Rule struct {
	// Requests is how many requests the rule admits per Window. Must be > 0.
	Requests int64
	// Window is the period Requests is spread over. Must be > 0, unless
	// Calendar is set. YAML: a number of seconds (decimals allowed) or a Go
	// duration string ("1m"); or a calendar unit (day, week, month, year),
	// which sets Calendar instead.
	Window time.Duration
	// Calendar, when set, makes the rule's windows the days, weeks, months
	// or years of the calendar in Zone (limit.Calendar); Window must then
	// be zero, and Algorithm fixed_window or sliding_window_counter. YAML:
	// window: month. The zero value is none.
	Calendar limit.Calendar
	// Zone is the IANA time zone of Calendar's windows ("Europe/Paris");
	// empty means UTC. Validate checks that the zone exists. YAML: zone.
	Zone string
	// Algorithm enforces the rule. The zero value is limit.TokenBucket; in
	// YAML, a rule with a calendar window and no algorithm is fixed_window.
	Algorithm limit.Algorithm
	// Burst is the bucket capacity of the bucket algorithms; zero means
	// Requests. It must be zero for the window algorithms, which have none.
	Burst int64
	// Shadow makes this rule's checks shadow checks: decide and count, never
	// block.
	Shadow bool

	at ruleOrigins
}

// Limit returns the limit.Limit the rule enforces.
func (r Rule) Limit() limit.Limit {
	return limit.Limit{Rate: r.Requests, Period: r.Window, Burst: r.Burst, Algorithm: r.Algorithm, Calendar: r.Calendar, Zone: r.Zone}
}

// PenaltyConfig configures a Penalty: after Strikes strikes (times a client
// was limited) within Within, the client is blocked for Base; each further
// strike while the count stays at or above Strikes doubles the block, up to
// Max.
//
// The zero PenaltyConfig is invalid. It is a small value; copy it freely.
type PenaltyConfig struct {
	// Strikes is how many strikes within Within start a block, 1 to
	// MaxStrikes.
	Strikes int
	// Within is how long a strike counts. Must be > 0.
	Within time.Duration
	// Base is the first block's length. Must be > 0.
	Base time.Duration
	// Max caps the block's length. Must be >= Base.
	Max time.Duration

	at penaltyOrigins
}

// MaxStrikes bounds PenaltyConfig.Strikes: a Penalty remembers the time of
// the last Strikes strikes of every client it tracks.
const MaxStrikes = 100

// origin says where a value came from, for error messages: a YAML position,
// an environment variable, or nothing (a Config built in code). bad marks a
// value that already failed to decode, so validation does not report it
// twice.
type origin struct {
	line, col int
	env, raw  string
	bad       bool
}

type ruleOrigins struct {
	rule, requests, window, algorithm, burst, zone origin
}

type penaltyOrigins struct {
	block, strikes, within, base, max origin
}
