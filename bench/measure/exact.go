package measure

import (
	"slices"
	"time"
)

// ExactAdmits is how many requests sent at the instants at one exact
// limiter would admit: a single token bucket of rate per second and burst
// (GCRA in integer nanoseconds) seeing every request at the instant it was
// sent, starting full. It is the reference a fleet's admissions are held
// to. It sorts at.
func ExactAdmits(rate, burst int64, at []time.Time) int64 {
	if rate < 1 || burst < 1 || len(at) == 0 {
		return 0
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	interval := time.Second / time.Duration(rate) // one token
	tolerance := interval * time.Duration(burst)  // a full bucket
	tat := at[0]                                  // theoretical arrival time: the bucket is full until then
	var admitted int64
	for _, t := range at {
		if tat.Before(t) {
			tat = t
		}
		if next := tat.Add(interval); next.Sub(t) <= tolerance {
			tat = next
			admitted++
		}
	}
	return admitted
}
