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

// Decision is the outcome of Allow and AllowN (a Reservation carries one):
// the embedded [limit.Result], everything a caller needs to answer the
// request and write rate-limit headers, and Source, where it was made. A
// limit reached is a Decision with Allowed false, never an error. Its
// fields, the Result's promoted:
//
//   - [limit.Result.Allowed]: whether the request was admitted (and its n
//     spent).
//   - [limit.Result.Remaining]: how many more requests of weight 1 would be
//     admitted right now; never negative.
//   - [limit.Result.RetryAfter]: how long until the same request would be
//     admitted, if no one else spends meanwhile; zero when Allowed.
//   - [limit.Result.ResetAfter]: how long until the key is back to its
//     fresh state (a full bucket, an empty window).
//   - [limit.Result.Limit]: the [Limit] the decision was made under.
//   - Source: [Local], [Remote] or [Degraded].
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
	// Limit is [limit.Limit], the limit a key is decided under: Rate
	// requests per Period, with a Burst, enforced by an Algorithm (the token
	// bucket unless it says otherwise). The zero value is invalid: build one
	// with [PerSecond], [PerMinute], [PerHour], [Per] or [PerCalendar]. A
	// Limit is a small value: copy it freely. Its fields:
	//
	//   - [limit.Limit.Rate], [limit.Limit.Period]: Rate requests per Period.
	//   - [limit.Limit.Burst]: the bucket's capacity; zero means Rate.
	//   - [limit.Limit.Algorithm]: [TokenBucket] (the zero value),
	//     [LeakyBucket], [FixedWindow], [SlidingWindowLog] or
	//     [SlidingWindowCounter].
	//   - [limit.Limit.Calendar], [limit.Limit.Zone]: windows that are the
	//     days, weeks, months or years of a time zone's calendar.
	//
	// Its methods:
	//
	//   - [limit.Limit.WithBurst]: the same limit with another burst:
	//     PerSecond(100).WithBurst(20) admits 20 at once, then one every
	//     10 ms.
	//   - [limit.Limit.WithAlgorithm]: the same limit under another
	//     algorithm.
	//   - [limit.Limit.Validate]: what is wrong with it, as
	//     [ErrInvalidLimit].
	//   - [limit.Limit.Capacity]: the most a single request may weigh;
	//     [limit.Limit.CheckN]: whether a weight n can ever pass
	//     ([ErrExceedsCapacity] if not).
	//   - [limit.Limit.String]: "100/1s burst 20 token_bucket".
	//   - [limit.Limit.Canonical]: its one canonical form (a burst equal to
	//     the rate written as zero).
	//   - [limit.Limit.Interval], [limit.Limit.Tolerance]: the token
	//     bucket's emission interval and burst tolerance.
	//   - [limit.Limit.WindowAt], [limit.Limit.WindowOf]: where the window
	//     algorithms' windows lie.
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
