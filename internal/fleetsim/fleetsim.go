// Package fleetsim drives a fleet of limiter nodes with an offered load over
// real time and records, per node and per time bucket, what was offered,
// what was admitted, where each decision came from and how long it took.
// The accuracy tests, the chaos tests and the command line's demo, tune and
// chaos commands all measure through it.
package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Decider is a node of the fleet: a *hybrid.Limiter.
type Decider interface {
	AllowN(ctx context.Context, key string, lim hybrid.Limit, n int64) (hybrid.Decision, error)
}

// Load is the traffic offered to the fleet.
type Load struct {
	// Rate is the requests per second offered to the whole fleet.
	Rate float64
	// Weight is the part of Rate node i receives at elapsed time at. Weights
	// need not sum to one: they are normalised over the nodes present, so a
	// weight of zero means the node is absent (not yet joined, or left).
	// Nil means an even spread.
	Weight func(i int, at time.Duration) float64
}

// Run describes one measurement.
type Run struct {
	Key      string
	Limit    hybrid.Limit
	Duration time.Duration
	// Bucket is the resolution of the timeline. Zero means 100 ms.
	Bucket time.Duration
	// Tick is how often each node's generator catches up with its rate. Zero
	// means 1 ms.
	Tick time.Duration
	// OnBucket, if set, is called with each completed bucket, for live
	// output, from the goroutine that called Drive.
	OnBucket func(b Bucket)
	// N is every request's weight (AllowN's n). Zero means 1. Offered and
	// Admitted count weight: a request of weight 100 admitted counts 100.
	N int64
}

// Bucket is what happened in one time bucket on one node, or on the fleet.
type Bucket struct {
	Start    time.Duration // since the run began
	Node     int           // -1 for the whole fleet
	Offered  int
	Admitted int
	Sources  [3]int // decisions by hybrid.Source (Local, Remote, Degraded)
	Errors   int
}

// Timeline is the outcome of a run.
type Timeline struct {
	Bucket  time.Duration
	Nodes   int
	Buckets [][]Bucket // [bucket][node]
	// Latencies holds every decision's latency, unsorted.
	Latencies []time.Duration
	// FirstError is the first error a decision returned, if any.
	FirstError error
	// Starved is, for the node whose driver was held up the longest, the
	// time it went without offering beyond what the limit's burst covers
	// (Burst emission intervals): a starved scheduler's doing. A limiter
	// cannot admit what was not offered in time, so under-admission up to
	// the limit's rate times Starved is the machine's, not the limiter's.
	Starved time.Duration
	// Stalled is the longest any node's driver went between two turns of
	// its loop (a decision's latency, and the scheduler's delays, included),
	// its last turn to Duration too: how late a decision may be put in its
	// bucket, and how much of the rate a driver left unsent at the end.
	Stalled time.Duration
	// Span is when the last decision returned, since the run began: the
	// Duration, or longer when slow decisions made the drivers catch up
	// after it.
	Span time.Duration
}

// Drive offers load to nodes for run.Duration and records the timeline. It
// returns early, with what it has, if ctx ends.
func Drive(ctx context.Context, nodes []Decider, run Run, load Load) (*Timeline, error) {
	if len(nodes) == 0 || run.Duration <= 0 || load.Rate <= 0 {
		return nil, errors.New("fleetsim: need nodes, a duration and a rate")
	}
	if run.Bucket <= 0 {
		run.Bucket = 100 * time.Millisecond
	}
	if run.Tick <= 0 {
		run.Tick = time.Millisecond
	}
	n := max(run.N, 1)
	weight := load.Weight
	if weight == nil {
		weight = func(int, time.Duration) float64 { return 1 }
	}
	nb := int((run.Duration + run.Bucket - 1) / run.Bucket)
	tl := &Timeline{Bucket: run.Bucket, Nodes: len(nodes), Buckets: make([][]Bucket, nb)}
	for b := range tl.Buckets {
		tl.Buckets[b] = make([]Bucket, len(nodes))
		for i := range nodes {
			tl.Buckets[b][i] = Bucket{Start: time.Duration(b) * run.Bucket, Node: i}
		}
	}
	// rateOf is node i's share of the offered rate at elapsed time at.
	rateOf := func(i int, at time.Duration) float64 {
		total := 0.0
		for j := range nodes {
			total += max(weight(j, at), 0)
		}
		if total == 0 {
			return 0
		}
		return load.Rate * max(weight(i, at), 0) / total
	}

	var mu sync.Mutex // guards tl
	fill := time.Duration(run.Limit.Burst) * run.Limit.Interval()
	start := time.Now()
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(run.Tick)
			defer tick.Stop()
			owed := 0.0 // requests this node should have sent and has not
			last := time.Duration(0)
			var lat []time.Duration
			var starved, stalled, span time.Duration
			finish := func() {
				mu.Lock()
				tl.Latencies = append(tl.Latencies, lat...)
				tl.Starved = max(tl.Starved, starved)
				tl.Stalled = max(tl.Stalled, stalled)
				tl.Span = max(tl.Span, span)
				mu.Unlock()
			}
			for {
				select {
				case <-ctx.Done():
					finish()
					return
				case <-tick.C:
				}
				at := time.Since(start)
				if at >= run.Duration {
					// What it owed since its last turn goes unsent: that
					// gap counts as a stall too.
					stalled = max(stalled, run.Duration-last)
					finish()
					return
				}
				gap := at - last
				if gap > fill {
					starved += gap - fill
				}
				stalled = max(stalled, gap)
				owed += rateOf(i, at) * (at - last).Seconds()
				last = at
				for ; owed >= 1; owed-- {
					t0 := time.Now()
					d, err := node.AllowN(ctx, run.Key, run.Limit, n)
					took := time.Since(t0)
					lat = append(lat, took)
					span = time.Since(start)
					b := int(span / run.Bucket)
					if b >= nb {
						b = nb - 1
					}
					mu.Lock()
					bk := &tl.Buckets[b][i]
					bk.Offered += int(n)
					if err != nil {
						bk.Errors++
						if tl.FirstError == nil {
							tl.FirstError = fmt.Errorf("fleetsim: node %d: %w", i, err)
						}
					} else {
						if d.Allowed {
							bk.Admitted += int(n)
						}
						if int(d.Source) < len(bk.Sources) {
							bk.Sources[d.Source]++
						}
					}
					mu.Unlock()
				}
			}
		}()
	}
	if run.OnBucket != nil {
		reported := 0
		for reported < nb {
			select {
			case <-ctx.Done():
				reported = nb
				continue
			case <-time.After(time.Until(start.Add(time.Duration(reported+1) * run.Bucket))):
			}
			mu.Lock()
			b := tl.fleet(reported)
			mu.Unlock()
			run.OnBucket(b)
			reported++
		}
	}
	wg.Wait()
	return tl, ctx.Err()
}

// fleet sums bucket b over the nodes.
func (tl *Timeline) fleet(b int) Bucket {
	out := Bucket{Start: time.Duration(b) * tl.Bucket, Node: -1}
	for _, n := range tl.Buckets[b] {
		out.Offered += n.Offered
		out.Admitted += n.Admitted
		out.Errors += n.Errors
		for s := range out.Sources {
			out.Sources[s] += n.Sources[s]
		}
	}
	return out
}

// Fleet returns the timeline summed over the nodes.
func (tl *Timeline) Fleet() []Bucket {
	out := make([]Bucket, len(tl.Buckets))
	for b := range tl.Buckets {
		out[b] = tl.fleet(b)
	}
	return out
}

// Admitted returns what the fleet admitted in [from, to).
func (tl *Timeline) Admitted(from, to time.Duration) int {
	sum := 0
	for b := range tl.Buckets {
		at := time.Duration(b) * tl.Bucket
		if at >= from && at < to {
			sum += tl.fleet(b).Admitted
		}
	}
	return sum
}

// Total returns the fleet's totals over the run.
func (tl *Timeline) Total() Bucket {
	out := Bucket{Node: -1}
	for b := range tl.Buckets {
		f := tl.fleet(b)
		out.Offered += f.Offered
		out.Admitted += f.Admitted
		out.Errors += f.Errors
		for s := range out.Sources {
			out.Sources[s] += f.Sources[s]
		}
	}
	return out
}

// Window is what the fleet admitted within one window of a timeline,
// from At; Last marks the window that ends with the timeline's last bucket
// (which also holds decisions made after the run's end on a loaded
// machine).
type Window struct {
	At       time.Duration
	Admitted int
	Last     bool
}

// Windows returns every window of w (rounded to whole buckets), sliding
// bucket by bucket.
func (tl *Timeline) Windows(w time.Duration) []Window {
	k := max(int(w/tl.Bucket), 1)
	fleet := tl.Fleet()
	var out []Window
	sum := 0
	for b := range fleet {
		sum += fleet[b].Admitted
		if b >= k {
			sum -= fleet[b-k].Admitted
		}
		if b >= k-1 {
			out = append(out, Window{At: time.Duration(b-k+1) * tl.Bucket, Admitted: sum, Last: b == len(fleet)-1})
		}
	}
	return out
}

// MaxWindow returns the most the fleet admitted within any window of w
// (rounded to whole buckets), sliding bucket by bucket, and where it began.
func (tl *Timeline) MaxWindow(w time.Duration) (admitted int, at time.Duration) {
	for _, x := range tl.Windows(w) {
		if x.Admitted > admitted {
			admitted, at = x.Admitted, x.At
		}
	}
	return admitted, at
}

// Percentile returns the latency at quantile q (0.5, 0.99, 0.999) of every
// decision in the run.
func (tl *Timeline) Percentile(q float64) time.Duration {
	if len(tl.Latencies) == 0 {
		return 0
	}
	s := slices.Clone(tl.Latencies)
	slices.Sort(s)
	i := min(int(q*float64(len(s))), len(s)-1)
	return s[i]
}
