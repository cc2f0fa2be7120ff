package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Trailer metadata keys a denied call carries (see the package
// documentation).
const (
	// PushbackKey is gRPC's server pushback: whole milliseconds, rounded up,
	// after which a client's automatic retry (a retry policy that lists
	// RESOURCE_EXHAUSTED or UNAVAILABLE) tries again.
	PushbackKey = "grpc-retry-pushback-ms"
	// RetryAfterKey is the retry delay in whole seconds, rounded up, at
	// least 1, as HTTP's Retry-After.
	RetryAfterKey = "retry-after"
	// LimitKey is the denying check's limit as its rule wrote it (the
	// requests of its window, not a bucket's burst), as X-RateLimit-Limit; only
	// on a limited call.
	LimitKey = "x-ratelimit-limit"
	// RemainingKey is what the denying check has left, as
	// X-RateLimit-Remaining; only on a limited call.
	RemainingKey = "x-ratelimit-remaining"
)

// Denial describes a call the interceptors turn away, for Config.OnDenied.
// A Denial is a small value.
type Denial struct {
	// Outcome is observe.Limited, observe.Banned (a banned address,
	// or a client under the penalty's block: Rule says which) or
	// observe.Unavailable (the limiter fails closed while Redis is down).
	Outcome observe.Outcome
	// Code is the status code DefaultOnDenied answers with:
	// ResourceExhausted when limited or under the penalty's block,
	// PermissionDenied when banned, Unavailable when failing closed.
	Code codes.Code
	// Rule names what denied the call: the check's rule for Limited and
	// Unavailable, observe.RuleBan or observe.RulePenalty for Banned.
	Rule string
	// Client is the client key the call was limited under.
	Client string
	// FullMethod is the call's method, "/package.Service/Method".
	FullMethod string
	// RetryAfter is how long the client should wait before trying again;
	// zero for a ban, which does not end.
	RetryAfter time.Duration
	// Check is the check that denied a Limited call, or that found the
	// limiter degraded for an Unavailable one; zero for Banned.
	Check rules.Check
	// Decision is Check's decision; zero for Banned.
	Decision hybrid.Decision
}

// DefaultOnDenied is the error a denied call ends with when
// Config.OnDenied is nil: a status of d.Code whose message names the rule
// and the delay (never the client key, which may hold an API key), and,
// except for a ban, two details: an errdetails.RetryInfo with d.RetryAfter,
// and for a limited or blocked call an errdetails.QuotaFailure whose
// violation's subject is the rule. It is safe for concurrent use.
func DefaultOnDenied(_ context.Context, d Denial) error {
	code := d.Code
	if code == codes.OK {
		code = codes.ResourceExhausted
	}
	var msg string
	switch {
	case d.Outcome == observe.Banned && d.Rule == observe.RuleBan:
		return status.Error(code, "grpclimit: calls from this address are forbidden")
	case d.Outcome == observe.Unavailable:
		msg = fmt.Sprintf("grpclimit: rate limiting is temporarily unavailable; retry after %v", d.RetryAfter)
	case d.Rule == observe.RulePenalty:
		msg = fmt.Sprintf("grpclimit: too many calls were refused; this client is blocked for %v", d.RetryAfter)
	default:
		msg = fmt.Sprintf("grpclimit: rate limit %q exceeded; retry after %v", d.Rule, d.RetryAfter)
	}
	st := status.New(code, msg)
	details := []protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(max(d.RetryAfter, 0))}}
	if d.Outcome != observe.Unavailable {
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     d.Rule,
			Description: quotaDescription(d),
		}}})
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil { // cannot happen: well-formed messages
		return st.Err()
	}
	return withDetails.Err()
}

// quotaDescription says what the quota of a limited call is.
func quotaDescription(d Denial) string {
	if d.Rule == observe.RulePenalty {
		return "client blocked after repeated limited calls"
	}
	return fmt.Sprintf("limit %v", d.Check.Limit)
}

// DefaultOnError is the error of a call the interceptors could not check
// when Config.OnError is nil: InvalidArgument for a malformed client key
// (err wraps httpkey.ErrMalformed: the client's fault), Internal otherwise,
// with a message that does not echo err, since it may name metadata or
// rules a client need not see. It is safe for concurrent use.
func DefaultOnError(_ context.Context, _ string, err error) error {
	if errors.Is(err, httpkey.ErrMalformed) {
		return status.Error(codes.InvalidArgument, "grpclimit: the call's client key is malformed")
	}
	return status.Error(codes.Internal, "grpclimit: the call could not be rate limited")
}

// denial describes a Limited, Banned or Unavailable verdict for OnDenied.
func (v *verdict) denial(method string) Denial {
	d := Denial{Outcome: v.outcome, Rule: v.rule, Client: v.client, FullMethod: method, RetryAfter: v.wait, Check: v.check, Decision: v.decision}
	switch {
	case v.outcome == observe.Unavailable:
		d.Code, d.Rule = codes.Unavailable, v.check.Rule
	case v.outcome == observe.Banned && v.rule == observe.RuleBan:
		d.Code = codes.PermissionDenied
	default:
		d.Code = codes.ResourceExhausted
	}
	return d
}
