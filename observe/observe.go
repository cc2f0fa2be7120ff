// Package observe holds what the request limiters around a hybrid.Limiter
// (the net/http middleware, the gRPC interceptors of grpclimit and Envoy's
// rate limit service in envoyrls) tell an Observer about each request: the
// checks they ran and the outcome. The metrics package's Recorder is an
// Observer; a service may write its own for logs or tracing.
//
// The package holds types only, so that each of those packages can report
// without importing another.
package observe

import (
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Outcome is what a request limiter did with a request. The zero value is
// Passed.
type Outcome int

// The outcomes.
const (
	// Passed: every check admitted the request (or it was not limited at all).
	Passed Outcome = iota
	// Limited: a check denied it (HTTP 429 Too Many Requests, gRPC
	// RESOURCE_EXHAUSTED, Envoy OVER_LIMIT).
	Limited
	// Banned: the client's IP is on the ban list or under a penalty (HTTP
	// 403 Forbidden, gRPC PERMISSION_DENIED).
	Banned
	// Unavailable: the limiter is degraded and fails closed (HTTP 503,
	// gRPC UNAVAILABLE).
	Unavailable
	// ShadowLimited: a check in shadow mode would have denied it; it passed.
	ShadowLimited
	// Failed: the request could not be checked (no client key, a bad
	// rule); answered as the limiter's configuration says.
	Failed
)

// RequestEvent.Rule values for a Banned request, which no rule of
// rules.Check names.
const (
	// RuleBan: the address is on the rules' ban list.
	RuleBan = "ban"
	// RulePenalty: the client is under the rules' penalty block.
	RulePenalty = "penalty"
)

// String returns the outcome's name in snake case, for logs and test
// output: "passed", "limited", "banned", "unavailable", "shadow_limited",
// "failed"; or "outcome(n)" for an unknown value. (Package metrics keeps its
// own label values.)
func (o Outcome) String() string {
	switch o {
	case Passed:
		return "passed"
	case Limited:
		return "limited"
	case Banned:
		return "banned"
	case Unavailable:
		return "unavailable"
	case ShadowLimited:
		return "shadow_limited"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

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
	Latency time.Duration // time spent deciding, before the handler ran
}

// Observer is told what a request limiter does, for metrics and logs. It
// is called on the request's goroutine: keep it quick, and safe for
// concurrent use. The metrics package's Recorder implements it.
type Observer interface {
	ObserveCheck(CheckEvent)
	ObserveRequest(RequestEvent)
}
