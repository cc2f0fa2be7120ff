package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// DefaultPenaltyClients is how many clients a penalty remembers when
// Config.PenaltyClients is zero (rules.DefaultPenaltyClients).
const DefaultPenaltyClients = rules.DefaultPenaltyClients

// Config configures the interceptors. Limiter and Rules are required; every
// other field has a usable zero value. New copies what it needs: changing a
// Config after New changes nothing. The functions it holds are called from
// every call's goroutine and must be safe for concurrent use.
type Config struct {
	// Limiter runs the checks. Required. The interceptors never close it.
	Limiter *hybrid.Limiter

	// Rules returns the rules in force, once per call: a rules.Watcher's
	// Current method, or rules.Static for fixed rules. Required.
	// A nil *Rules from it fails the call.
	Rules func() *rules.Rules

	// IP finds the client's address for the ban list and the per_ip rule:
	// the peer's address, or the forwarding metadata (forwarded,
	// x-forwarded-for) when the peer is one of its TrustedProxies. The zero
	// value believes no metadata. A peer that is not an IP address (a Unix
	// socket) fails the call rather than skip the ban list.
	IP httpkey.IPResolver

	// Client keys the per-client rules (tier, endpoint, default) and the
	// penalty. It sees the call as an HTTP request (see the package
	// documentation): httpkey.APIKey reads a metadata value,
	// httpkey.User the context, httpkey.Endpoint the method. Nil means
	// httpkey.IP(IP): by peer address, IPv6 grouped by /64. An error
	// wrapping httpkey.ErrNoKey or httpkey.ErrMalformed fails the call.
	Client httpkey.Extractor

	// User returns the authenticated user's id from the call's context,
	// for the per_user rule; ok false means anonymous. Nil: every call is
	// anonymous.
	User func(ctx context.Context) (id string, ok bool)

	// Tier returns the client's tier ("free", "premium") for the tier rules.
	// Nil or "": no tier check.
	Tier func(ctx context.Context, fullMethod string) string

	// Priority reports high-priority calls, which skip the priority reserve
	// checks. Nil: no call is priority.
	Priority func(ctx context.Context, fullMethod string) bool

	// Cost weighs a call: the n every check spends. req is the request
	// message of a unary call, nil for a stream, which is checked once when
	// it opens. Nil means 1. Zero checks without spending. A negative cost,
	// or one above a limit's capacity, fails the call.
	Cost func(ctx context.Context, fullMethod string, req any) int64

	// OnDenied returns the error a denied call ends with: limited, banned,
	// blocked by the penalty, or refused because the limiter fails closed
	// while Redis is down. Before it runs, the trailers that carry the
	// retry information are set (see the package documentation). It must
	// return a non-nil error, normally a status error (a nil one is
	// replaced by DefaultOnDenied's). Nil means DefaultOnDenied.
	OnDenied func(ctx context.Context, d Denial) error

	// OnError returns the error of a call the interceptors could not check
	// (no client key, a malformed one, a negative cost, a limit the limiter
	// refuses); err starts with "grpclimit: " and wraps the cause. It must
	// return a non-nil error (a nil one is replaced by DefaultOnError's).
	// Nil means DefaultOnError, with the error logged to Logger unless the
	// client's key was malformed.
	OnError func(ctx context.Context, fullMethod string, err error) error

	// Observer is told of every check and every call, as the HTTP
	// middleware's is (metrics.Recorder fits). RequestEvent.Client is the
	// client key, RequestEvent.Latency the time the interceptor took before
	// the handler ran. Nil means none.
	Observer observe.Observer

	// PenaltyClients bounds how many clients the rules' penalty remembers.
	// Zero means DefaultPenaltyClients.
	PenaltyClients int

	// Logger receives the default OnError's internal errors and the errors
	// of shadow checks. Nil means slog.Default().
	Logger *slog.Logger
}

// validate reports the mistakes New refuses.
func (c *Config) validate() error {
	var errs []error
	if c.Limiter == nil {
		errs = append(errs, errors.New("grpclimit: Config.Limiter is nil"))
	}
	if c.Rules == nil {
		errs = append(errs, errors.New("grpclimit: Config.Rules is nil; use rules.Static or a Watcher's Current"))
	}
	if err := c.IP.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("grpclimit: Config.IP: %w", err))
	}
	if c.PenaltyClients < 0 {
		errs = append(errs, fmt.Errorf("grpclimit: Config.PenaltyClients %d is negative", c.PenaltyClients))
	}
	return errors.Join(errs...)
}
