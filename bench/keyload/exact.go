package keyload

import (
	"fmt"
	"math"
	"time"
)

// Outcome is what became of one request of a stream.
type Outcome uint8

const (
	// Unanswered: never sent (its node's queue was full) or not answered
	// by the end of the drain.
	Unanswered Outcome = iota
	Admitted
	Refused
	// Failed: the call returned an error (a refusal, as far as the caller
	// goes).
	Failed
)

// Accuracy compares what a fleet admitted of a stream's measured part with
// what one exact limiter admits of the same requests, key by key.
type Accuracy struct {
	// Decided is the measured part's requests the fleet answered; Admitted
	// those it admitted.
	Decided, Admitted int64
	// Exact is what one token bucket per key (GCRA, integer nanoseconds)
	// admits of the decided requests at their scheduled instants, having
	// seen the warm-up's decided requests before them.
	Exact int64
	// Over sums, over the keys, what the fleet admitted beyond the exact
	// limiter's count for the key; Under what it admitted short of it.
	// OverKeys and UnderKeys count those keys.
	Over, Under         int64
	OverKeys, UnderKeys int
}

// CompareExact holds the fleet's outcomes (one per request of s, in order)
// to one exact limiter of rate per second and burst per key. An unanswered
// request is left out of both sides: the fleet did not decide it.
func CompareExact(s *Stream, out []Outcome, rate, burst int64) (Accuracy, error) {
	var acc Accuracy
	fleet := make([]int32, s.Spec.Keys)
	exact := make([]int32, s.Spec.Keys)
	err := judge(s, out, rate, burst, func(i int, ok bool) {
		k := s.Requests[i].Key
		acc.Decided++
		if ok {
			acc.Exact++
			exact[k]++
		}
		if out[i] == Admitted {
			acc.Admitted++
			fleet[k]++
		}
	})
	if err != nil {
		return Accuracy{}, err
	}
	apart(fleet, exact, func(_ int, over, under int64) {
		acc.Over += over
		acc.Under += under
		if over > 0 {
			acc.OverKeys++
		}
		if under > 0 {
			acc.UnderKeys++
		}
	})
	return acc, nil
}

// apart calls f with each key that the fleet and the exact limiter
// admitted differently: what the fleet admitted beyond the exact count
// (over) or short of it (under).
func apart(fleet, exact []int32, f func(k int, over, under int64)) {
	for k := range fleet {
		switch d := int64(fleet[k]) - int64(exact[k]); {
		case d > 0:
			f(k, d, 0)
		case d < 0:
			f(k, 0, -d)
		}
	}
}

// judge runs one exact limiter of rate per second and burst per key (GCRA
// in integer nanoseconds) over the requests of s the fleet decided, at
// their scheduled instants, the warm-up included, and calls decided with
// each decided request of the measured part (its index in s.Requests) and
// whether the exact limiter admitted it.
func judge(s *Stream, out []Outcome, rate, burst int64, decided func(i int, ok bool)) error {
	if len(out) != len(s.Requests) {
		return fmt.Errorf("keyload: %d outcomes for %d requests", len(out), len(s.Requests))
	}
	if rate < 1 || burst < 1 {
		return fmt.Errorf("keyload: exact limiter of %d/s burst %d: want both positive", rate, burst)
	}
	interval := int64(time.Second) / rate // one token, in ns
	tolerance := interval * burst         // a full bucket
	tat := make([]int64, s.Spec.Keys)     // theoretical arrival time: the bucket is full until then
	for k := range tat {
		tat[k] = math.MinInt64
	}
	for i, r := range s.Requests {
		if out[i] == Unanswered {
			continue
		}
		t := int64(r.At)
		ok := false
		if next := max(tat[r.Key], t) + interval; next-t <= tolerance {
			tat[r.Key], ok = next, true
		}
		if r.At >= 0 {
			decided(i, ok)
		}
	}
	return nil
}
