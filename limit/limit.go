// Package limit defines what a rate limit is: a rate over a period, a burst
// and an algorithm, together with the Result of one decision and the raw
// State of one key.
//
// The local engine (package local), the Redis scripts (package remote) and the
// hybrid limiter all speak of the same Limit in the same units, so a node can
// seed its memory from what Redis holds and a decision reads the same whether
// it was made in memory or in Redis.
//
// Units: time in state is always integer nanoseconds since the Unix epoch;
// durations are time.Duration. Floats appear only in reporting.
package limit

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Bounds that keep every computation exact in int64 nanoseconds locally and
// in the 2^53 integers a Lua number holds exactly in Redis.
const (
	// MaxSpan bounds the time a limit may hold in its state: a bucket's
	// Burst×interval and a window's Period. 2^52 ns is about 52 days; the
	// token bucket may carry one more span of debt, which still fits in the
	// 2^53 integers Redis Lua numbers represent exactly.
	MaxSpan = time.Duration(1 << 52)

	// MaxWindowPeriod bounds Period for the window algorithms: ten years.
	// Their state is a window index and counts, never a time in
	// nanoseconds, and Redis keeps their period in microseconds, so a
	// window may be far longer than MaxSpan: a day, a month of 30 days or
	// a year of 365, as envoyproxy/ratelimit's units are.
	MaxWindowPeriod = 10 * 366 * 24 * time.Hour

	// MaxWindowRate bounds Rate for the window algorithms, whose counts the
	// local engine scales by a node's share (2^15), with room for a window of
	// debt, without overflowing int64.
	MaxWindowRate = 1 << 46

	// MaxLogRate bounds Rate for the sliding window log, which keeps one
	// timestamp per admitted request: above it, use SlidingWindowCounter.
	MaxLogRate = 100_000

	// MaxKeyLen is the longest key a limiter accepts, in bytes. Redis key
	// naming hashes long keys; this bound only stops runaway inputs.
	MaxKeyLen = 4096
)

// Errors callers branch on. Each returned error wraps one of these and adds
// the values involved.
var (
	// ErrInvalidLimit means a Limit that cannot be enforced: a zero or
	// negative rate or period, a negative burst, or a value out of bounds.
	ErrInvalidLimit = errors.New("limit: invalid limit")

	// ErrExceedsCapacity means a request weight n larger than the most the
	// limit can ever admit at once (its Capacity). It is an error, not a
	// silent deny, because retrying can never succeed.
	ErrExceedsCapacity = errors.New("limit: n exceeds the limit's capacity")

	// ErrInvalidN means a negative request weight.
	ErrInvalidN = errors.New("limit: negative n")

	// ErrInvalidKey means an empty key or one longer than MaxKeyLen.
	ErrInvalidKey = errors.New("limit: invalid key")
)

// Limit is a rate limit: Rate requests per Period, with a Burst, enforced by
// an Algorithm. The zero value is invalid; build one with PerSecond, PerMinute,
// PerHour or Per. A Limit is a small value: copy it freely.
//
// Burst, by example: PerSecond(100).WithBurst(20) on the token bucket admits
// 20 requests at once from a full bucket, then one every 10 ms; an idle key
// refills to 20 again after 200 ms. Without WithBurst the burst equals the
// rate (100), as in go-redis/redis_rate.
type Limit struct {
	// Rate is how many requests the limit admits per Period. Must be > 0.
	Rate int64
	// Period is the length of time Rate is spread over: the window of the
	// window algorithms. Must be > 0; for the window algorithms, a whole
	// number of microseconds (Redis TIME's resolution) and at most
	// MaxWindowPeriod; for the buckets, Burst×Period/Rate is at most MaxSpan.
	// It must be zero with a Calendar, whose unit is the window.
	Period time.Duration
	// Burst is the bucket capacity of TokenBucket (how many requests may pass
	// at once) and the queue capacity of LeakyBucket's Reserve. Zero means
	// Rate. The window algorithms have no burst: it must be zero there.
	Burst int64
	// Algorithm chooses how the limit is enforced. The zero value is
	// TokenBucket.
	Algorithm Algorithm
	// Calendar, when set, makes the windows of FixedWindow or
	// SlidingWindowCounter the days, weeks, months or years of the
	// calendar in Zone (see Calendar), instead of Periods aligned to the
	// Unix epoch: "1,000 a month, from the first in Paris". Period must
	// then be zero. The zero value is NoCalendar. PerCalendar builds one.
	Calendar Calendar
	// Zone is the IANA name of the time zone of Calendar's windows, such
	// as "Europe/Paris". Empty means UTC. It must be empty without a
	// Calendar. Validate checks its form; whether the zone exists is known
	// when it is loaded (Zones.Load), which an unknown one fails with
	// ErrInvalidLimit.
	Zone string
}

// Per returns a token bucket limit of rate requests per period, with a burst
// equal to rate.
func Per(rate int64, period time.Duration) Limit { return Limit{Rate: rate, Period: period} }

// PerSecond is shorthand for Per(rate, time.Second).
func PerSecond(rate int64) Limit { return Per(rate, time.Second) }

// PerMinute is shorthand for Per(rate, time.Minute).
func PerMinute(rate int64) Limit { return Per(rate, time.Minute) }

// PerHour is shorthand for Per(rate, time.Hour).
func PerHour(rate int64) Limit { return Per(rate, time.Hour) }

// PerCalendar returns a fixed window limit of rate requests per calendar
// unit (a day, week, month or year) in the time zone called zone ("" for
// UTC): PerCalendar(1000, Month, "Europe/Paris") admits 1,000 requests from
// midnight on the first of each month, Paris time. WithAlgorithm(
// SlidingWindowCounter) weighs the previous unit as that algorithm does.
func PerCalendar(rate int64, unit Calendar, zone string) Limit {
	return Limit{Rate: rate, Algorithm: FixedWindow, Calendar: unit, Zone: zone}
}

// WithBurst returns a copy of l with the given burst.
func (l Limit) WithBurst(burst int64) Limit { l.Burst = burst; return l }

// WithAlgorithm returns a copy of l enforced by a.
func (l Limit) WithAlgorithm(a Algorithm) Limit { l.Algorithm = a; return l }

// Canonical returns l in its one canonical form: a bucket's Burst equal to
// its Rate is written as zero, so that PerSecond(10) and
// PerSecond(10).WithBurst(10), which are the same limit, name the same state.
func (l Limit) Canonical() Limit {
	if l.Burst == l.Rate && l.Algorithm.IsBucket() {
		l.Burst = 0
	}
	return l
}

// Capacity is the largest n a single request may weigh: the burst of the
// buckets and the rate of the window algorithms.
func (l Limit) Capacity() int64 {
	if l.Algorithm.IsBucket() && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// Interval is the token bucket's emission interval, Period/Rate in whole
// nanoseconds rounded up: rounding up means the limit is never exceeded, and
// the rate it enforces is within 1 ns per request of the exact one.
func (l Limit) Interval() time.Duration {
	return time.Duration((int64(l.Period) + l.Rate - 1) / l.Rate)
}

// Tolerance is the token bucket's burst tolerance, Capacity()×Interval(): how
// far ahead of now the theoretical arrival time may run.
func (l Limit) Tolerance() time.Duration { return time.Duration(l.Capacity()) * l.Interval() }

// Validate reports whether l can be enforced exactly, and why not.
func (l Limit) Validate() error {
	switch {
	case !l.Algorithm.valid():
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, l.Algorithm)
	case l.Calendar != NoCalendar || l.Zone != "":
		return l.validateCalendar()
	case l.Rate <= 0:
		return fmt.Errorf("%w: rate %d must be positive", ErrInvalidLimit, l.Rate)
	case l.Period <= 0:
		return fmt.Errorf("%w: period %v must be positive", ErrInvalidLimit, l.Period)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst %d must not be negative", ErrInvalidLimit, l.Burst)
	}
	if l.Algorithm.IsBucket() {
		if l.Rate > int64(l.Period) {
			return fmt.Errorf("%w: rate %d per %v is more than one request per nanosecond", ErrInvalidLimit, l.Rate, l.Period)
		}
		hi, span := bits.Mul64(uint64(l.Capacity()), uint64(l.Interval()))
		if hi != 0 || span > uint64(MaxSpan) {
			return fmt.Errorf("%w: burst %d × interval %v exceeds %v", ErrInvalidLimit, l.Capacity(), l.Interval(), MaxSpan)
		}
		return nil
	}
	switch {
	case l.Burst != 0:
		return fmt.Errorf("%w: burst %d set on %v, which has no burst", ErrInvalidLimit, l.Burst, l.Algorithm)
	case l.Period%time.Microsecond != 0:
		return fmt.Errorf("%w: period %v of %v must be a whole number of microseconds", ErrInvalidLimit, l.Period, l.Algorithm)
	case l.Period > MaxWindowPeriod:
		return fmt.Errorf("%w: period %v of %v exceeds %v", ErrInvalidLimit, l.Period, l.Algorithm, MaxWindowPeriod)
	case l.Rate > MaxWindowRate:
		return fmt.Errorf("%w: rate %d of %v exceeds %d", ErrInvalidLimit, l.Rate, l.Algorithm, int64(MaxWindowRate))
	case l.Algorithm == SlidingWindowLog && l.Rate > MaxLogRate:
		return fmt.Errorf("%w: rate %d exceeds %d for sliding_window_log, which stores one timestamp per request; use sliding_window_counter", ErrInvalidLimit, l.Rate, MaxLogRate)
	}
	return nil
}

// validateCalendar is Validate for a limit with a Calendar or a Zone.
func (l Limit) validateCalendar() error {
	switch {
	case int(l.Calendar) >= len(calendarNames):
		return fmt.Errorf("%w: unknown calendar %d", ErrInvalidLimit, l.Calendar)
	case l.Calendar == NoCalendar:
		return fmt.Errorf("%w: zone %q set without a calendar unit", ErrInvalidLimit, l.Zone)
	case l.Algorithm != FixedWindow && l.Algorithm != SlidingWindowCounter:
		return fmt.Errorf("%w: calendar windows need fixed_window or sliding_window_counter, not %v", ErrInvalidLimit, l.Algorithm)
	case l.Rate <= 0:
		return fmt.Errorf("%w: rate %d must be positive", ErrInvalidLimit, l.Rate)
	case l.Rate > MaxWindowRate:
		return fmt.Errorf("%w: rate %d of %v exceeds %d", ErrInvalidLimit, l.Rate, l.Algorithm, int64(MaxWindowRate))
	case l.Period != 0:
		return fmt.Errorf("%w: period %v set on a calendar limit, whose window is a %v", ErrInvalidLimit, l.Period, l.Calendar)
	case l.Burst != 0:
		return fmt.Errorf("%w: burst %d set on %v, which has no burst", ErrInvalidLimit, l.Burst, l.Algorithm)
	}
	return checkZone(l.Zone)
}

// CheckN reports whether n is a request weight l can ever admit. n == 0 is a
// valid "peek": the decision reports the state without spending.
func (l Limit) CheckN(n int64) error {
	if n < 0 {
		return fmt.Errorf("%w: %d", ErrInvalidN, n)
	}
	if n > l.Capacity() {
		return fmt.Errorf("%w: n %d > capacity %d of %v", ErrExceedsCapacity, n, l.Capacity(), l)
	}
	return nil
}

// String describes l as "100/1s burst 20 token_bucket", or for a calendar
// limit "1000/month Europe/Paris fixed_window".
func (l Limit) String() string {
	if l.Calendar != NoCalendar {
		zone := l.Zone
		if zone == "" {
			zone = "UTC"
		}
		return fmt.Sprintf("%d/%v %s %v", l.Rate, l.Calendar, zone, l.Algorithm)
	}
	if l.Algorithm.IsBucket() {
		return fmt.Sprintf("%d/%v burst %d %v", l.Rate, l.Period, l.Capacity(), l.Algorithm)
	}
	return fmt.Sprintf("%d/%v %v", l.Rate, l.Period, l.Algorithm)
}

// CheckKey reports whether key is usable: not empty and at most MaxKeyLen bytes.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}
