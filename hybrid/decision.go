package hybrid

import (
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Source says where a decision was made.
type Source int

const (
	// Local: from node memory, in Async or LocalOnly mode.
	Local Source = iota
	// Remote: in Redis, in Sync mode.
	Remote
	// Degraded: from node memory under the fallback, because Redis failed.
	Degraded
)

func (s Source) String() string {
	switch s {
	case Local:
		return "local"
	case Remote:
		return "remote"
	case Degraded:
		return "degraded"
	}
	return fmt.Sprintf("source(%d)", int(s))
}

// Decision is the outcome of Allow: the Result (allowed, limit, remaining,
// retry-after, reset-after) and where it was made.
type Decision struct {
	limit.Result
	Source Source
}

// Errors callers branch on. A limit reached is a Decision, never an error;
// Redis trouble is a Degraded decision, never an error.
var (
	// ErrClosed: the limiter was closed.
	ErrClosed = errors.New("hybrid: limiter closed")
	// ErrUnsupported: the limit cannot run in the limiter's mode (the
	// sliding window log and calendar windows need Sync or LocalOnly: Async
	// reconciliation cannot merge an exact log from summaries, nor count
	// calendar windows yet), or Reserve and Wait on a window algorithm,
	// which cannot reserve.
	ErrUnsupported = errors.New("hybrid: unsupported")
	// ErrRedisUnavailable: New could not reach Redis (see
	// Config.StartDegraded).
	ErrRedisUnavailable = errors.New("hybrid: redis unavailable at start")
)

// The limit package's errors, for callers that import only hybrid.
var (
	ErrInvalidLimit    = limit.ErrInvalidLimit
	ErrInvalidKey      = limit.ErrInvalidKey
	ErrInvalidN        = limit.ErrInvalidN
	ErrExceedsCapacity = limit.ErrExceedsCapacity
)

// isCallerError reports whether err is the caller's mistake, not Redis's.
func isCallerError(err error) bool {
	return errors.Is(err, limit.ErrInvalidLimit) || errors.Is(err, limit.ErrInvalidKey) || errors.Is(err, ErrClosed) ||
		errors.Is(err, limit.ErrInvalidN) || errors.Is(err, limit.ErrExceedsCapacity) ||
		errors.Is(err, ErrUnsupported) || errors.Is(err, ErrClosed)
}

// Limit and its constructors, for callers that import only hybrid.
type (
	// Limit is limit.Limit: Rate per Period with a Burst, and an Algorithm.
	Limit = limit.Limit
	// Algorithm is limit.Algorithm.
	Algorithm = limit.Algorithm
)

// The algorithms.
const (
	TokenBucket          = limit.TokenBucket
	LeakyBucket          = limit.LeakyBucket
	FixedWindow          = limit.FixedWindow
	SlidingWindowLog     = limit.SlidingWindowLog
	SlidingWindowCounter = limit.SlidingWindowCounter
)

// PerSecond is limit.PerSecond: a token bucket of rate per second, burst rate.
func PerSecond(rate int64) Limit { return limit.PerSecond(rate) }

// PerMinute is limit.PerMinute.
func PerMinute(rate int64) Limit { return limit.PerMinute(rate) }

// PerHour is limit.PerHour.
func PerHour(rate int64) Limit { return limit.PerHour(rate) }

// Per is limit.Per: rate per period.
func Per(rate int64, period time.Duration) Limit { return limit.Per(rate, period) }
