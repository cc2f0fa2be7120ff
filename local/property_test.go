package local

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit/limit"
)

// arrival is one request of a random sequence.
type arrival struct {
	at int64
	n  int64
}

// randomArrivals returns count requests with random gaps (bursty: many at the
// same instant, some long pauses) and weights up to maxN.
func randomArrivals(r *rand.Rand, count int, meanGap time.Duration, maxN int64) []arrival {
	out := make([]arrival, count)
	now := t0
	for i := range out {
		switch r.IntN(4) {
		case 0: // same instant
		case 1:
			now += r.Int64N(int64(meanGap) * 10)
		default:
			now += r.Int64N(int64(meanGap) + 1)
		}
		out[i] = arrival{at: now, n: 1 + r.Int64N(maxN)}
	}
	return out
}

// admittedOf plays arrivals against a fresh engine and returns the admitted ones.
func admittedOf(t testing.TB, lim limit.Limit, arrivals []arrival) []arrival {
	e := newEngine(t, Config{})
	var got []arrival
	for _, a := range arrivals {
		res, err := e.AllowN(a.at, "k", lim, a.n)
		require.NoError(t, err)
		if res.Allowed {
			got = append(got, a)
		}
	}
	return got
}

// checkTokenBucketBound asserts GCRA's guarantee: over any span [a, b] the
// admitted weight is at most the burst plus what the rate refills in b-a.
func checkTokenBucketBound(t testing.TB, lim limit.Limit, admitted []arrival) {
	interval := int64(lim.Interval())
	for i := range admitted {
		sum := int64(0)
		for j := i; j < len(admitted); j++ {
			sum += admitted[j].n
			bound := lim.Capacity() + (admitted[j].at-admitted[i].at)/interval
			if sum > bound {
				t.Fatalf("admitted %d in [%d, %d], bound %d (%v)", sum, admitted[i].at, admitted[j].at, bound, lim)
			}
		}
	}
}

// checkSlidingLogBound asserts that no window (t-Period, t] holds more than Rate.
func checkSlidingLogBound(t testing.TB, lim limit.Limit, admitted []arrival) {
	period := int64(lim.Period)
	for j := range admitted {
		sum := int64(0)
		for i := j; i >= 0 && admitted[i].at > admitted[j].at-period; i-- {
			sum += admitted[i].n
		}
		if sum > lim.Rate {
			t.Fatalf("window ending %d holds %d > %d (%v)", admitted[j].at, sum, lim.Rate, lim)
		}
	}
}

func TestPropertyExactAlgorithmsNeverOverAdmit(t *testing.T) {
	limits := []limit.Limit{
		limit.PerSecond(10).WithBurst(3),
		limit.PerSecond(100),
		limit.PerSecond(7).WithBurst(1),
		limit.Per(3, time.Second).WithBurst(2), // an interval that is not a whole number of ns
		limit.PerSecond(1_000_000).WithBurst(50),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, base := range limits {
		for range 30 {
			gap := base.Interval() * time.Duration(1+r.IntN(3)) / 2
			arrivals := randomArrivals(r, 400, gap, base.Capacity())
			checkTokenBucketBound(t, base, admittedOf(t, base, arrivals))

			log := limit.Per(base.Capacity(), base.Period).WithAlgorithm(limit.SlidingWindowLog)
			checkSlidingLogBound(t, log, admittedOf(t, log, randomArrivals(r, 400, gap, base.Capacity())))
		}
	}
}

// FuzzExactAlgorithmsNeverOverAdmit lets the fuzzer search for an arrival
// sequence that breaks the bounds. `go test` runs the seed corpus; `go test
// -fuzz FuzzExact ./local/` searches.
func FuzzExactAlgorithmsNeverOverAdmit(f *testing.F) {
	f.Add(uint64(1), uint16(10), uint16(3), uint32(1000))
	f.Add(uint64(99), uint16(1), uint16(1), uint32(1))
	f.Add(uint64(7), uint16(1000), uint16(999), uint32(1_000_000))
	f.Fuzz(func(t *testing.T, seed uint64, rateN, burst uint16, periodMs uint32) {
		if rateN == 0 || periodMs == 0 || periodMs > 3_600_000 {
			return
		}
		bucket := limit.Per(int64(rateN), time.Duration(periodMs)*time.Millisecond).WithBurst(int64(burst))
		if bucket.Validate() != nil {
			return
		}
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		gap := max(bucket.Interval()/2, time.Nanosecond)
		checkTokenBucketBound(t, bucket, admittedOf(t, bucket, randomArrivals(r, 200, gap, bucket.Capacity())))

		log := limit.Per(int64(rateN), bucket.Period).WithAlgorithm(limit.SlidingWindowLog)
		if log.Validate() == nil {
			checkSlidingLogBound(t, log, admittedOf(t, log, randomArrivals(r, 200, gap, min(log.Capacity(), 5))))
		}
	})
}

// TestParityWithXTimeRate plays the same arrivals against our token bucket
// and golang.org/x/time/rate's Limiter: the decisions agree, within one token
// of rounding (x/time/rate keeps float tokens; we keep integer time).
func TestParityWithXTimeRate(t *testing.T) {
	cases := []struct {
		lim   limit.Limit
		exact bool // the interval is a whole number of ns: every decision must match
	}{
		{limit.PerSecond(100).WithBurst(10), true},
		{limit.PerSecond(10).WithBurst(1), true},
		{limit.PerSecond(1000).WithBurst(100), true},
		{limit.PerSecond(3).WithBurst(5), false},
		{limit.PerSecond(7).WithBurst(7), false},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range cases {
		t.Run(tc.lim.String(), func(t *testing.T) {
			for range 20 {
				e := newEngine(t, Config{})
				x := rate.NewLimiter(rate.Limit(float64(tc.lim.Rate)/tc.lim.Period.Seconds()), int(tc.lim.Capacity()))
				// Off-grid instants (a prime number of ns apart) keep float
				// rounding away from exact refill boundaries.
				now := t0 + 7919
				ours, theirs, mismatches := 0, 0, 0
				for range 500 {
					now += r.Int64N(int64(tc.lim.Interval())*2) + 7919
					n := 1 + r.Int64N(tc.lim.Capacity())
					res, err := e.AllowN(now, "k", tc.lim, n)
					require.NoError(t, err)
					xa := x.AllowN(time.Unix(0, now), int(n))
					if res.Allowed {
						ours++
					}
					if xa {
						theirs++
					}
					if res.Allowed != xa {
						mismatches++
					}
				}
				if tc.exact {
					assert.Zero(t, mismatches, "every decision matches x/time/rate")
				}
				assert.InDelta(t, theirs, ours, 1, "admitted counts within one token")
			}
		})
	}
}
