package limit

import (
	"fmt"
	"strings"
)

// Algorithm chooses how a Limit is enforced. The zero value is TokenBucket.
type Algorithm uint8

// The five algorithms every rate limiter picks from.
const (
	// TokenBucket admits bursts up to Burst and refills at Rate per Period.
	// Its state is one int64: the GCRA theoretical arrival time.
	TokenBucket Algorithm = iota
	// LeakyBucket smooths output to one request per Period/Rate. As a meter
	// (Allow) it admits a request only when the previous one has drained; as a
	// queue (Reserve) it admits up to Burst requests and tells each how long
	// to wait.
	LeakyBucket
	// FixedWindow counts requests in windows aligned to the Unix epoch. It is
	// cheap but admits up to twice the rate across a window boundary.
	FixedWindow
	// SlidingWindowLog keeps the time of every admitted request: exact, with
	// memory proportional to the rate (at most MaxLogRate).
	SlidingWindowLog
	// SlidingWindowCounter weights the previous window's count by how much of
	// it still overlaps the sliding window (Cloudflare's approximation).
	SlidingWindowCounter
)

var algorithmNames = [...]string{
	TokenBucket:          "token_bucket",
	LeakyBucket:          "leaky_bucket",
	FixedWindow:          "fixed_window",
	SlidingWindowLog:     "sliding_window_log",
	SlidingWindowCounter: "sliding_window_counter",
}

// Algorithms lists every algorithm, in order.
var Algorithms = [...]Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter}

func (a Algorithm) valid() bool { return int(a) < len(algorithmNames) }

// IsBucket reports whether a is a GCRA bucket (token or leaky), whose state is
// a theoretical arrival time and whose capacity is its Burst.
func (a Algorithm) IsBucket() bool { return a == TokenBucket || a == LeakyBucket }

// String returns the algorithm's configuration name, such as "token_bucket".
func (a Algorithm) String() string {
	if !a.valid() {
		return fmt.Sprintf("algorithm(%d)", uint8(a))
	}
	return algorithmNames[a]
}

// ParseAlgorithm reads an algorithm by its configuration name. It accepts the
// names String returns, with dashes or underscores, any case, and
// "sliding_window" as the common shorthand for the sliding window counter.
func ParseAlgorithm(s string) (Algorithm, error) {
	norm := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	if norm == "sliding_window" {
		return SlidingWindowCounter, nil
	}
	for i, name := range algorithmNames {
		if name == norm {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want one of %s)", ErrInvalidLimit, s, strings.Join(algorithmNames[:], ", "))
}
