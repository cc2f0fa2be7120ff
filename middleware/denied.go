package middleware

import (
	"net/http"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Denial describes a request the middleware turns away, for Config.OnDenied:
// what happened, what the default answer would be, and the facts a custom
// answer may want. A Denial is a small value, valid after OnDenied returns.
type Denial struct {
	// Outcome is Limited, Banned (a banned address, or a client under the
	// penalty's block: Rule says which) or Unavailable (the limiter fails
	// closed while Redis is down).
	Outcome observe.Outcome
	// Status is the status DefaultOnDenied answers with: 429 Too Many
	// Requests for Limited, 403 Forbidden for Banned, 503 Service
	// Unavailable for Unavailable.
	Status int
	// Code is the "error" code of DefaultOnDenied's JSON body:
	// CodeRateLimited, CodeBanned, CodePenalty or CodeUnavailable.
	Code string
	// Rule names what denied the request: the check's rule
	// (rules.Check.Rule) for Limited and Unavailable, RuleBan or
	// RulePenalty for Banned.
	Rule string
	// Client is the client key the request was limited under ("" for a
	// banned address, which is turned away before its key matters).
	Client string
	// RetryAfter is how long the client should wait before trying again;
	// zero for a ban, which does not end. The Retry-After header, already
	// set, holds it in whole seconds, rounded up, at least 1.
	RetryAfter time.Duration
	// Check is the check that denied a Limited request, or that found the
	// limiter degraded for an Unavailable one; the zero Check for Banned.
	Check rules.Check
	// Decision is Check's decision: its Limit, Remaining, ResetAfter and
	// Source. The zero Decision for Banned.
	Decision hybrid.Decision
}

// DefaultOnDenied is what the middleware answers a denied request with when
// Config.OnDenied is nil: d.Status, Retry-After (on every denial but a ban:
// whole seconds, rounded up, at least 1) and a JSON body
//
//	{"error":"rate_limit_exceeded","message":"Too many requests. Please retry after 30 seconds.","retry_after":30}
//
// whose error is d.Code (a ban's body has no retry_after). A custom
// OnDenied can change a header or log and then call DefaultOnDenied. It is
// safe for concurrent use.
func DefaultOnDenied(w http.ResponseWriter, _ *http.Request, d Denial) {
	switch d.Code {
	case CodeRateLimited:
		writeRetry(w, d.Status, d.Code, "Too many requests.", d.RetryAfter)
	case CodeUnavailable:
		writeRetry(w, d.Status, d.Code, "Rate limiting is temporarily unavailable.", d.RetryAfter)
	case CodePenalty:
		writeRetry(w, d.Status, d.Code, "Too many requests were refused; this client is blocked for a while.", d.RetryAfter)
	case CodeBanned:
		writeJSON(w, d.Status, []byte(bodyBanned))
	default:
		// A Denial built by hand: its own status and code, 429 and
		// CodeRateLimited if it has none.
		status, code := d.Status, d.Code
		if status == 0 {
			status = http.StatusTooManyRequests
		}
		if code == "" {
			code = CodeRateLimited
		}
		writeRetry(w, status, code, "Request refused.", d.RetryAfter)
	}
}
