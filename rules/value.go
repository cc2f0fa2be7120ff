package rules

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// This file reads the scalar values the YAML file and the environment share,
// from text, so both report the same messages.

// parseSeconds reads a length of time written as a number of seconds ("60",
// "0.5") or as a Go duration string ("1m30s"). It does not check the sign:
// the caller reports a non-positive value with the text as written.
func parseSeconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return 0, fmt.Errorf("want seconds or a duration such as \"1m\", got %s", quote(s))
	}
	// A plain decimal ("60", "0.5"): time.ParseDuration reads it exactly.
	if d, err := time.ParseDuration(s + "s"); err == nil {
		return d, nil
	}
	// Exponent forms ("1e3") and values out of range.
	f, _ := strconv.ParseFloat(s, 64)
	ns := math.Round(f * float64(time.Second))
	if math.IsNaN(ns) || ns >= math.MaxInt64 || ns <= math.MinInt64 {
		return 0, fmt.Errorf("%s seconds is out of range", quote(s))
	}
	return time.Duration(ns), nil
}

// parseAlgorithm reads an algorithm name as limit.ParseAlgorithm does, with
// a message that lists the names it accepts.
func parseAlgorithm(s string) (limit.Algorithm, error) {
	a, err := limit.ParseAlgorithm(s)
	if err != nil {
		names := make([]string, len(limit.Algorithms))
		for i, a := range limit.Algorithms {
			names[i] = a.String()
		}
		return 0, fmt.Errorf("unknown algorithm %s, want one of %s", quote(s), strings.Join(names, ", "))
	}
	return a, nil
}

// secondsDuration converts whole seconds to a Duration; false on overflow.
func secondsDuration(n int64) (time.Duration, bool) {
	if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}
