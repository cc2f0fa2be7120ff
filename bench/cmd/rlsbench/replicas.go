package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/hybridlimit/hybridlimit/bench/rlsrun"
)

// The replica runs: a fleet of 2 or 4 replicas of one service, as
// operators run them behind Envoy, and a new key that the fleet has never
// seen.

// routing is how the load spreads a key's calls over the replicas.
type routing string

const (
	// stickyRouting sends every call of the key to one replica, as one
	// Envoy holding its one connection to a rate limit service host does.
	stickyRouting routing = "sticky"
	// roundRobin sends each call to the next replica, as Envoys spread
	// over the replicas by a load balancer do.
	roundRobin routing = "round-robin"
	// burst is every replica offered the key at once, as fast as the
	// clients go: what the fleet admits then is its bound.
	burst routing = "every replica bursting"
)

// replicaRun is one run of a new key on a fleet of replicas.
type replicaRun struct {
	kind      rlsrun.Kind
	instances int
	routing   routing
	limit     int     // the key's limit, calls a second (a fixed window of one second)
	offered   float64 // calls a second; 0: as fast as the clients go
	seconds   int
	calls     int
	tally     windowTally
	worst     int           // most admitted in one second
	bound     float64       // hybridlimit: the Async bound ÷ limit (0: exact or unknown)
	roundTrip time.Duration // hybridlimit: the mean reconciliation round
}

// windowTally is what a run's calls met, counted by window (whole seconds
// from the run's start, the services' windows).
type windowTally struct {
	// refusedWithin is the calls refused (OVER_LIMIT) among the first
	// limit calls sent in their window: calls the limit allows.
	refusedWithin int
	// late is the calls answered after Envoy's timeout, or not at all.
	late int
	errs int
	// admitted[s] is what window s admitted.
	admitted []int
}

// perSecond is what the run admitted a second ÷ limit.
func (t windowTally) perSecond(limit int) float64 {
	sum := 0
	for _, a := range t.admitted {
		sum += a
	}
	return float64(sum) / float64(len(t.admitted)) / float64(limit)
}

// tally counts samples (sorted by the time sent, as drive returns them)
// against a limit a window of one second, over secs windows; calls sent
// after the last window are left out.
func tally(s []sample, limit, secs int) windowTally {
	t := windowTally{admitted: make([]int, secs)}
	sent := make([]int, secs) // calls sent so far in each window
	for _, x := range s {
		w := secondOf(x.at)
		if w < 0 || w >= secs {
			continue
		}
		sent[w]++
		if x.err || x.lat > envoyTimeout {
			t.late++
		}
		if x.err {
			t.errs++
			continue
		}
		if x.over {
			if sent[w] <= limit {
				t.refusedWithin++
			}
			continue
		}
		t.admitted[w]++
	}
	return t
}

// secondOf is the whole second of the run a call sent at at falls in: -1
// for one sent in the second before the run's start (goroutines sending as
// fast as they go start 20 ms early), which int(at / time.Second), rounding
// toward zero, put in window 0: every replica bursting, the second before
// the run's first window was counted in it, and an exact limiter admitted
// 1.1 times the limit over a run of 10 s.
func secondOf(at time.Duration) int {
	w := int(at / time.Second)
	if at < 0 && at%time.Second != 0 {
		w--
	}
	return w
}

// replicaRuns starts n fresh replicas of kind for each routing and offers
// a new key: at exactly its limit (sticky, then round-robin), then as
// fast as the clients go from every replica at once.
func (b *bench) replicaRuns(ctx context.Context, kind rlsrun.Kind, n int) ([]replicaRun, error) {
	var out []replicaRun
	for _, r := range []routing{stickyRouting, roundRobin, burst} {
		progress("replicas: %v, %d replicas, a new key, %s", kind, n, r)
		run, err := b.replicaRun(ctx, kind, n, r)
		if err != nil {
			return out, fmt.Errorf("%d replicas, %s: %w", n, r, err)
		}
		out = append(out, run)
	}
	return out, nil
}

func (b *bench) replicaRun(ctx context.Context, kind rlsrun.Kind, n int, r routing) (replicaRun, error) {
	ins, err := b.start(ctx, kind, n)
	if err != nil {
		return replicaRun{}, err
	}
	defer stopAll(ins)
	c, err := dial(addrs(ins), b.o.goroutines)
	if err != nil {
		return replicaRun{}, err
	}
	defer c.close()
	drive(ctx, c, 1000, b.o.warm, b.o.timeout, perClient(1000), nil) // processes and connections warm, the key untouched
	limit := b.o.replicaLimit
	run := replicaRun{kind: kind, instances: n, routing: r, limit: limit, offered: float64(limit), seconds: int(b.o.replicaFor / time.Second)}
	switch r {
	case stickyRouting:
		c.route = func(int, int, int) int { return 0 }
	case roundRobin:
		c.route = func(_, i, n int) int { return i % n }
	case burst:
		c.pinned, run.offered = true, 0
	}
	req := descriptorRequest(benchDomain, "replica", fmt.Sprintf("new-%d", time.Now().UnixNano()))
	if err := alignedStart(ctx); err != nil {
		return replicaRun{}, err
	}
	// At the limit the calls are one period apart from the first; start
	// half a period into the second, so that a call's window does not
	// hang on a millisecond of scheduling at the boundary.
	if run.offered > 0 {
		if err := sleep(ctx, time.Second/time.Duration(2*limit)); err != nil {
			return replicaRun{}, err
		}
	}
	s := drive(ctx, c, run.offered, time.Duration(run.seconds)*time.Second, b.o.timeout, func(int, int) *rlsv3.RateLimitRequest { return req }, nil)
	run.calls = len(s)
	run.tally = tally(s, limit, run.seconds)
	run.worst = slices.Max(run.tally.admitted)
	if kind == rlsrun.Ours {
		if run.roundTrip, run.bound, err = b.asyncBound(ctx, ins); err != nil {
			return replicaRun{}, err
		}
	}
	return run, nil
}

// asyncBound is docs/accuracy.md's Async bound for windows of one second
// without a burst, ÷ the limit: 1 + (1.1·I + r)·(N−1)/N, with I the sync
// interval and r the mean reconciliation round the instances measured.
func (b *bench) asyncBound(ctx context.Context, ins []*rlsrun.Instance) (time.Duration, float64, error) {
	var sum, count float64
	for _, in := range ins {
		s, err1 := in.Metric(ctx, `rate_limit_sync_round_duration_seconds_sum{result="ok"}`)
		c, err2 := in.Metric(ctx, `rate_limit_sync_round_duration_seconds_count{result="ok"}`)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, err
		}
		sum, count = sum+s, count+c
	}
	if count == 0 {
		return 0, 0, nil
	}
	n := float64(len(ins))
	rt := time.Duration(sum / count * float64(time.Second))
	return rt, 1 + (1.1*b.o.syncInterval.Seconds()+rt.Seconds())*(n-1)/n, nil
}

// writeReplicas writes the replica runs.
func (r *report) writeReplicas(w io.Writer) {
	if len(r.replicas) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## A fleet of replicas\n\n"+
		"2 and 4 replicas of each service, fresh, on one Redis; one key never seen before, limited to %d a second (a fixed window of one second), for %v. "+
		"**At the limit**: offered exactly its limit, from half a call's period into each second, so each window holds the limit and no more; "+
		"sticky sends all the key's calls to one replica (one Envoy, one connection), round-robin sends each to the next. "+
		"Every call refused there is one the limit allows (\"refused within the limit\"; an exact limiter refuses 0). "+
		"**Every replica bursting**: each replica offered the key at once, as fast as the clients go (each goroutine pinned to one replica): "+
		"what the run admitted a second ÷ the limit, beside hybridlimit's Async bound of docs/accuracy.md (envoyproxy/ratelimit counts in Redis and is exact). "+
		"Each call is put in the second it was sent in, by the load generator's clock: a call sent just before a second ends may be counted by the service in the next, "+
		"so the lowest and highest second (in parentheses) stray from the limit by the calls in flight at the seconds' ends, more the busier the machine, while the whole run's figure does not. "+
		"\"Past 20 ms\": calls answered after Envoy's default timeout of the rate limit service, or not at all.\n\n",
		r.o.replicaLimit, r.o.replicaFor)
	fmt.Fprintln(w, "| routing | service | replicas | offered/s | calls | refused within the limit | past 20 ms | errors | admitted a second ÷ limit (lowest–highest second) | bound |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	rs := slices.Clone(r.replicas)
	slices.SortStableFunc(rs, func(a, b replicaRun) int {
		return cmpAll(routingOrder(a.routing)-routingOrder(b.routing), a.instances-b.instances, int(b.kind)-int(a.kind)) // envoyproxy/ratelimit first
	})
	for _, x := range rs {
		offered, refused := fmt.Sprintf("%.0f", x.offered), fmt.Sprint(x.tally.refusedWithin)
		if x.offered == 0 {
			offered, refused = "max", "—"
		}
		bound := "1 (exact)"
		if x.kind == rlsrun.Ours {
			bound = "—"
			if x.bound > 0 {
				bound = fmt.Sprintf("%.3f (round %s)", x.bound, ms(x.roundTrip))
			}
		}
		fmt.Fprintf(w, "| %s | %v | %d | %s | %d | %s | %d | %d | %.3f (%.2f–%.2f) | %s |\n", x.routing, x.kind, x.instances, offered, x.calls, refused,
			x.tally.late, x.tally.errs, x.tally.perSecond(x.limit), float64(slices.Min(x.tally.admitted))/float64(x.limit), float64(x.worst)/float64(x.limit), bound)
	}
}

func routingOrder(r routing) int { return slices.Index([]routing{stickyRouting, roundRobin, burst}, r) }

// cmpAll is the first non-zero of cs.
func cmpAll(cs ...int) int {
	for _, c := range cs {
		if c != 0 {
			return c
		}
	}
	return 0
}
