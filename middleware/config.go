package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// DefaultPenaltyClients is how many clients a penalty remembers when
// Config.PenaltyClients is zero (rules.DefaultPenaltyClients).
const DefaultPenaltyClients = rules.DefaultPenaltyClients

// Config configures the middleware. Limiter and Rules are required; every
// other field has a usable zero value. New copies what it needs: changing a
// Config after New changes nothing. The functions it holds are called from
// every request's goroutine and must be safe for concurrent use.
type Config struct {
	// Limiter runs the checks. Required. The middleware never closes it.
	Limiter *hybrid.Limiter

	// Rules returns the rules in force. The middleware calls it once per
	// request, so a rules.Watcher's Current method plugs in and a reload
	// takes effect on the next request; rules.Static wraps a fixed *Rules.
	// Required. A nil *Rules from it fails the request.
	Rules func() *rules.Rules

	// IP finds the client's address for the ban list and the per_ip rule:
	// r.RemoteAddr, or a forwarding header when the peer is one of its
	// TrustedProxies. The zero value believes no header. An address that
	// cannot be read (a RemoteAddr that is not an IP address, as on a Unix
	// socket) fails the request rather than skip the ban list.
	IP httpkey.IPResolver

	// Client keys the per-client rules (tier, endpoint, default) and the
	// penalty: httpkey.IP, APIKey, User, or First and All of them. Nil
	// means httpkey.IP(IP): by address, IPv6 grouped by /64. An error
	// wrapping httpkey.ErrNoKey or httpkey.ErrMalformed fails the request.
	Client httpkey.Extractor

	// User returns the authenticated user's id from the request context,
	// for the per_user rule; ok false means anonymous. It has the shape
	// httpkey.User takes, so one function serves both. Nil: every request
	// is anonymous.
	User func(ctx context.Context) (id string, ok bool)

	// Tier returns the client's tier ("free", "premium"), for the tier
	// rules. Nil or "": no tier check.
	Tier func(*http.Request) string

	// Priority reports high-priority traffic, which skips the priority
	// reserve checks and so may use the capacity the reserve keeps back.
	// Nil: no request is priority.
	Priority func(*http.Request) bool

	// Cost weighs a request: the n every check spends. Nil means 1. Zero
	// checks without spending (the request always passes, and the headers
	// still report the state). A negative cost, or one above a limit's
	// capacity, fails the request.
	Cost func(*http.Request) int64

	// Headers chooses the rate-limit header families sent. The zero value
	// sends both.
	Headers Headers

	// OnError answers a request the middleware could not check (Outcome
	// Failed); err starts with "middleware: " and wraps the cause
	// (httpkey.ErrNoKey, httpkey.ErrMalformed, limit.ErrExceedsCapacity,
	// ...). Nil means DefaultOnError with Logger. OnError writes the
	// response; the next handler is not called.
	OnError func(w http.ResponseWriter, r *http.Request, err error)

	// OnDenied answers a request the middleware turns away: limited (429),
	// banned or blocked by the penalty (403), or refused because the
	// limiter fails closed while Redis is down (503). The Denial says which,
	// with the status, code and Retry-After the default answer would use,
	// and for a limited request the check and decision that denied it.
	// Before OnDenied runs, the middleware has set the rate-limit headers
	// of a limited request (Config.Headers) and Retry-After (every denial
	// but a ban); OnDenied writes the status and the body, and may change
	// or delete any header. Nil means DefaultOnDenied. The next handler is
	// not called.
	OnDenied func(w http.ResponseWriter, r *http.Request, d Denial)

	// Observer is told of every check and every request, for metrics. Nil
	// means none.
	Observer observe.Observer

	// PenaltyClients bounds how many clients the rules' penalty remembers
	// (rules.NewPenalty's maxClients). Zero means DefaultPenaltyClients.
	PenaltyClients int

	// Logger receives the default OnError's 500s and the errors of shadow
	// checks. Nil means slog.Default().
	Logger *slog.Logger
}

// Headers chooses which rate-limit header families the middleware sends.
// Retry-After is sent on every 429 and 503, and on a penalty's 403, whatever
// the choice. The zero value is BothHeaders.
type Headers uint8

// The header families.
const (
	// BothHeaders sends the X-RateLimit and the IETF fields. The zero value.
	BothHeaders Headers = iota
	// XRateLimitHeaders sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset only.
	XRateLimitHeaders
	// IETFHeaders sends RateLimit-Policy and RateLimit only.
	IETFHeaders
	// NoHeaders sends no rate-limit fields.
	NoHeaders
)

// String returns the constant's name, or "Headers(n)".
func (h Headers) String() string {
	switch h {
	case BothHeaders:
		return "BothHeaders"
	case XRateLimitHeaders:
		return "XRateLimitHeaders"
	case IETFHeaders:
		return "IETFHeaders"
	case NoHeaders:
		return "NoHeaders"
	}
	return fmt.Sprintf("Headers(%d)", uint8(h))
}

func (h Headers) xRateLimit() bool { return h == BothHeaders || h == XRateLimitHeaders }
func (h Headers) ietf() bool       { return h == BothHeaders || h == IETFHeaders }

// validate reports the mistakes New refuses.
func (c *Config) validate() error {
	var errs []error
	if c.Limiter == nil {
		errs = append(errs, errors.New("middleware: Config.Limiter is nil"))
	}
	if c.Rules == nil {
		errs = append(errs, errors.New("middleware: Config.Rules is nil; use rules.Static or a Watcher's Current"))
	}
	if err := c.IP.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("middleware: Config.IP: %w", err))
	}
	if c.Headers > NoHeaders {
		errs = append(errs, fmt.Errorf("middleware: Config.Headers %v is not a Headers constant", c.Headers))
	}
	if c.PenaltyClients < 0 {
		errs = append(errs, fmt.Errorf("middleware: Config.PenaltyClients %d is negative", c.PenaltyClients))
	}
	return errors.Join(errs...)
}
