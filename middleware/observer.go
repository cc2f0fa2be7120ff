package middleware

import (
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Outcome is what the middleware did with a request.
type Outcome int

// The outcomes.
const (
	// Passed: every check admitted the request (or it was not limited at all).
	Passed Outcome = iota
	// Limited: a check denied it; answered 429 Too Many Requests.
	Limited
	// Banned: the client's IP is on the ban list or under a penalty;
	// answered 403 Forbidden.
	Banned
	// Unavailable: the limiter is degraded and fails closed; answered 503.
	Unavailable
	// ShadowLimited: a check in shadow mode would have denied it; it passed.
	ShadowLimited
	// Failed: the middleware could not check it (no client key, a bad rule);
	// answered as Config.OnError says.
	Failed
)

// CheckEvent is one limit check of one request.
type CheckEvent struct {
	Rule     string          // the rule's name, as rules.Check.Rule ("global", "tier:free", ...)
	Decision hybrid.Decision // the limiter's decision
	Shadow   bool            // the rule is in shadow mode: it decides and counts, never blocks
	Latency  time.Duration   // time spent in the limiter for this check
}

// RequestEvent is the outcome of one request.
type RequestEvent struct {
	Outcome Outcome
	Rule    string        // the rule that answered (Limited, Banned, ShadowLimited); "" otherwise
	Client  string        // the client key the request was limited under
	Latency time.Duration // time spent in the middleware before the handler ran
}

// Observer is told what the middleware does, for metrics and logs. It is
// called on the request's goroutine: keep it quick. The metrics package's
// Recorder implements it.
type Observer interface {
	ObserveCheck(CheckEvent)
	ObserveRequest(RequestEvent)
}
