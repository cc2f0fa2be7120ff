package replay

import "time"

// Report is what a replay found: the traffic replayed, and for each rules
// file what it would have done with it. It encodes as JSON for CI
// (`hybridlimit replay -json`); WriteText prints it as tables.
type Report struct {
	// From and To are the times of the first and the last request.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Requests counts the requests replayed.
	Requests int64 `json:"requests"`
	// Lines counts the lines read, and Malformed those that could not be
	// read (not replayed), with the first few of them.
	Lines             int64    `json:"lines"`
	Malformed         int64    `json:"malformed_lines"`
	MalformedExamples []string `json:"malformed_examples,omitempty"`
	// Runs are one per rules file, in the order given: the rules, then
	// the ones compared with them.
	Runs []Run `json:"runs"`
	// Changes, with two rules files, are the requests and clients whose
	// answer differs between them.
	Changes *Changes `json:"changes,omitempty"`
}

// Run is what one rules file would have done with the traffic.
type Run struct {
	// Name names the rules (their file).
	Name     string   `json:"name"`
	Outcomes Outcomes `json:"outcomes"`
	// Rules are the rules that checked any request, in the order the
	// rules engine checks them.
	Rules []RuleReport `json:"rules"`
	// Clients are the clients with the most requests refused or shadow
	// limited, most first.
	Clients []ClientReport `json:"top_clients"`
	// FirstMinute is the first minute with a would-be 429 (a 429, or a
	// shadow rule's denial), WorstMinute the one with the most; nil when
	// there was none. Minutes are every minute with one, in order.
	FirstMinute *Minute  `json:"first_minute,omitempty"`
	WorstMinute *Minute  `json:"worst_minute,omitempty"`
	Minutes     []Minute `json:"minutes"`
	// Unchecked says why requests could not be checked (a client key the
	// keying needs and the log lacks, an address it cannot read).
	Unchecked []Reason `json:"unchecked,omitempty"`
}

// Outcomes counts requests by what the middleware would answer.
type Outcomes struct {
	Passed int64 `json:"passed"`
	// Limited: answered 429.
	Limited int64 `json:"limited"`
	// ShadowLimited: passed, but a rule in shadow mode denied it: a 429
	// once the rule is enforced.
	ShadowLimited int64 `json:"shadow_limited"`
	// Banned: answered 403, by the ban list or the penalty.
	Banned int64 `json:"banned"`
	// Unchecked: the middleware could not check it (Run.Unchecked says
	// why); the gateway answers these 400, 401 or 500.
	Unchecked int64 `json:"unchecked"`
}

// RuleReport is one rule's part.
type RuleReport struct {
	Rule   string `json:"rule"`
	Limit  string `json:"limit,omitempty"`
	Shadow bool   `json:"shadow,omitempty"`
	// Checked counts the requests the rule checked (a request a rule
	// before it refused is not checked further), Denied those its limit
	// denied.
	Checked int64 `json:"checked"`
	Denied  int64 `json:"denied"`
	// Limited counts the requests the rule answered 429, ShadowLimited
	// those it would have answered 429 were it not in shadow mode.
	Limited       int64 `json:"limited"`
	ShadowLimited int64 `json:"shadow_limited"`
	// RetryAfterMedian and RetryAfterMax are the Retry-After, in seconds,
	// of those requests.
	RetryAfterMedian int64 `json:"retry_after_median_s"`
	RetryAfterMax    int64 `json:"retry_after_max_s"`
}

// ClientReport is one client's part.
type ClientReport struct {
	// Client is the client key the middleware limited the client under
	// ("ip:203.0.113.7", "key:...").
	Client        string `json:"client"`
	Requests      int64  `json:"requests"`
	Limited       int64  `json:"limited"`
	ShadowLimited int64  `json:"shadow_limited"`
	Banned        int64  `json:"banned"`
	// LongestRetryAfter is the longest Retry-After, in seconds, it was or
	// would have been told.
	LongestRetryAfter int64 `json:"longest_retry_after_s"`
}

// Minute is one minute's would-be 429s, by the rule that answered.
type Minute struct {
	Start      time.Time        `json:"start"`
	WouldBe429 int64            `json:"would_be_429"`
	ByRule     map[string]int64 `json:"by_rule"`
}

// Reason is why some requests could not be checked.
type Reason struct {
	Reason   string `json:"reason"`
	Requests int64  `json:"requests"`
}

// Changes are the differences between two runs' answers, as clients see
// them: a request refused (429 or 403) by one and admitted by the other.
type Changes struct {
	// Requests counts the requests answered differently: NewlyRefused
	// were admitted by the first rules and refused by the second,
	// NewlyAdmitted the other way round.
	Requests      int64 `json:"requests"`
	NewlyRefused  int64 `json:"newly_refused"`
	NewlyAdmitted int64 `json:"newly_admitted"`
	// Clients are the clients with the most requests answered
	// differently, most first.
	Clients []ClientChange `json:"top_clients"`
	// Examples are the first few requests answered differently.
	Examples []ChangedRequest `json:"examples"`
}

// ClientChange is one client's changes.
type ClientChange struct {
	Client        string `json:"client"`
	Requests      int64  `json:"requests"`
	NewlyRefused  int64  `json:"newly_refused"`
	NewlyAdmitted int64  `json:"newly_admitted"`
}

// ChangedRequest is one request answered differently.
type ChangedRequest struct {
	Time   time.Time `json:"time"`
	Client string    `json:"client"`
	Method string    `json:"method"`
	Target string    `json:"target"`
	// Before and After are the two answers: "passed", "429 by per_ip",
	// "403 by ban", ...
	Before string `json:"before"`
	After  string `json:"after"`
}
