package measure

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// AllowFunc decides one request for key.
type AllowFunc func(ctx context.Context, key string) (bool, error)

// ParallelResult is the outcome of Parallel.
type ParallelResult struct {
	Ops, Errors, Denied int64
	Elapsed             time.Duration
	Latency             Histogram
	FirstError          error
}

// PerSec is the throughput.
func (r *ParallelResult) PerSec() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }

// Parallel runs goroutines callers of allow for d, each walking keys from
// its own offset, and records every call's latency (time.Now around the
// call, so each includes a clock read: see ClockOverhead).
func Parallel(ctx context.Context, allow AllowFunc, keys []string, goroutines int, d time.Duration) *ParallelResult {
	var stop atomic.Bool
	var wg sync.WaitGroup
	res := &ParallelResult{}
	var mu sync.Mutex
	start := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := new(Histogram)
			var ops, errs, denied int64
			var first error
			i := g * 7919
			for !stop.Load() {
				// Check the clock every 64 calls only: stop is set by the timer.
				for range 64 {
					i++
					key := keys[i%len(keys)]
					t0 := time.Now()
					ok, err := allow(ctx, key)
					h.Record(time.Since(t0))
					ops++
					switch {
					case err != nil:
						errs++
						if first == nil {
							first = err
						}
					case !ok:
						denied++
					}
				}
			}
			mu.Lock()
			res.Latency.Merge(h)
			res.Ops += ops
			res.Errors += errs
			res.Denied += denied
			if res.FirstError == nil {
				res.FirstError = first
			}
			mu.Unlock()
		}()
	}
	t := time.AfterFunc(d, func() { stop.Store(true) })
	defer t.Stop()
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// ClockOverhead measures what Parallel's measurement adds to each call: the
// latency of an empty call, under the same goroutines.
func ClockOverhead(goroutines int, d time.Duration) *ParallelResult {
	return Parallel(context.Background(), func(context.Context, string) (bool, error) { return true, nil }, []string{"k"}, goroutines, d)
}
