package measure

import (
	"context"
	"errors"
	"sync"
	"time"
)

// FleetRun describes one accuracy measurement: nodes (separate instances
// sharing one limit) are offered Rate requests per second in total, evenly
// spread, for Duration, all on Key.
type FleetRun struct {
	Key      string
	Rate     float64
	Duration time.Duration
	// Bucket is the resolution of the admissions timeline. Zero means 100 ms.
	Bucket time.Duration
	// Tick is how often each node's generator catches up with its rate.
	// Zero means 1 ms.
	Tick time.Duration
}

// FleetResult is what the fleet did.
type FleetResult struct {
	Offered, Admitted, Errors int64
	// Buckets[b] is what the fleet admitted in bucket b.
	Buckets    []int64
	Bucket     time.Duration
	Latency    Histogram
	FirstError error
}

// MaxWindow is the most the fleet admitted within any window of w (whole
// buckets), sliding bucket by bucket.
func (r *FleetResult) MaxWindow(w time.Duration) int64 {
	k := max(int(w/r.Bucket), 1)
	var sum, best int64
	for b := range r.Buckets {
		sum += r.Buckets[b]
		if b >= k {
			sum -= r.Buckets[b-k]
		}
		best = max(best, sum) // partial windows at the start count: they are never larger

	}
	return best
}

// Fleet drives nodes as fleetsim does in the main module: each node's
// generator wakes every Tick and sends what it owes at its share of Rate,
// one call at a time; every decision is counted in the bucket it ended in.
func Fleet(ctx context.Context, nodes []AllowFunc, run FleetRun) (*FleetResult, error) {
	if len(nodes) == 0 || run.Duration <= 0 || run.Rate <= 0 {
		return nil, errors.New("measure: need nodes, a duration and a rate")
	}
	if run.Bucket <= 0 {
		run.Bucket = 100 * time.Millisecond
	}
	if run.Tick <= 0 {
		run.Tick = time.Millisecond
	}
	nb := int((run.Duration + run.Bucket - 1) / run.Bucket)
	res := &FleetResult{Buckets: make([]int64, nb), Bucket: run.Bucket}
	perNode := run.Rate / float64(len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for _, allow := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := new(Histogram)
			buckets := make([]int64, nb)
			var offered, admitted, errs int64
			var first error
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				res.Latency.Merge(h)
				res.Offered += offered
				res.Admitted += admitted
				res.Errors += errs
				for b, n := range buckets {
					res.Buckets[b] += n
				}
				if res.FirstError == nil && first != nil {
					res.FirstError = first
				}
			}()
			tick := time.NewTicker(run.Tick)
			defer tick.Stop()
			owed, last := 0.0, time.Duration(0)
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				// A tick that comes after the end still sends what was
				// owed up to it (the generator woke late: a loaded machine).
				at := min(time.Since(start), run.Duration)
				owed += perNode * (at - last).Seconds()
				last = at
				for ; owed >= 1; owed-- {
					t0 := time.Now()
					ok, err := allow(ctx, run.Key)
					h.Record(time.Since(t0))
					b := min(int(time.Since(start)/run.Bucket), nb-1)
					offered++
					switch {
					case err != nil:
						errs++
						if first == nil {
							first = err
						}
					case ok:
						admitted++
						buckets[b]++
					}
				}
				if at >= run.Duration {
					return
				}
			}
		}()
	}
	wg.Wait()
	return res, ctx.Err()
}
