package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/bench/contender"
	"github.com/hybridlimit/hybridlimit/bench/measure"
)

// perfPolicy is the limit of the decision-cost measurements: the same
// structure as the accuracy policy, high enough that every decision is
// admitted, so every contender runs its admitting path (the common one).
var perfPolicy = contender.Policy{Rate: 1_000_000_000, Burst: 1_000_000_000}

// result is one contender's measurements.
type result struct {
	c contender.Contender

	// Serial decision on an existing key (testing.Benchmark).
	NsPerOp, AllocsPerOp, BytesPerOp float64 // the median run's
	NsMin, NsMax                     float64
	SerialErrors                     int64

	// Parallel load.
	Par *measure.ParallelResult
	// What the clients sent, and what Redis executed, per decision of the
	// parallel load.
	ParCmds, ParTrips, ParServerCalls, ParServerUsec float64
	ParDegraded                                      int64

	// Accuracy: nodes offered twice the limit.
	Fleet                                                  *measure.FleetResult
	FleetLimit, FleetExactOwn                              float64 // policy limit over the run; what an exact limiter of its own algorithm admits
	FleetCmds, FleetTrips, FleetServerCalls, FleetServerUs float64
	FleetDegraded                                          int64
}

// Ratio is admitted/limit of the accuracy run.
func (r *result) Ratio() float64 { return float64(r.Fleet.Admitted) / r.FleetLimit }

// measureClock is the cost of the latency measurement itself: an empty call
// timed as every decision is.
func measureClock(o options) *measure.ParallelResult {
	r := measure.ClockOverhead(o.goroutines, min(o.load, 300*time.Millisecond))
	logf("timing overhead (empty call, %d goroutines): p50 %v p99 %v", o.goroutines, r.Latency.Quantile(0.5), r.Latency.Quantile(0.99))
	return r
}

// measureAll measures every contender. The serial benchmarks run first,
// interleaved (round r of every contender, then round r+1), so that changes
// in the machine's background load fall on all contenders alike; then each
// contender in turn gets its parallel load and its accuracy run.
func measureAll(ctx context.Context, o options, admin *redis.Client, addr string, cs []contender.Contender, idx []int) ([]*result, error) {
	if err := admin.FlushAll(ctx).Err(); err != nil { // the private server only
		return nil, err
	}
	res := make([]*result, len(cs))
	envs := make([]contender.Env, len(cs))
	counters := make([]*measure.Counter, len(cs))
	for i, c := range cs {
		res[i] = &result{c: c}
		counters[i] = new(measure.Counter)
		envs[i] = contender.Env{Addr: addr, Hooks: []redis.Hook{counters[i]}, Prefix: fmt.Sprintf("c%d:", idx[i])}
	}
	if err := measureSerial(ctx, o, envs, res); err != nil {
		return nil, err
	}
	for i, r := range res {
		if err := measureParallel(ctx, o, admin, envs[i], counters[i], r); err != nil {
			return nil, fmt.Errorf("%s: %w", r.c.Name, err)
		}
		if err := measureFleet(ctx, o, admin, envs[i], counters[i], idx[i], r); err != nil {
			return nil, fmt.Errorf("%s: %w", r.c.Name, err)
		}
		logf("%-40s %9.0f ns/op %5.1f allocs/op | %d goroutines: p50 %v p99 %v %.0f/s | redis %.2f cmds %.2f trips %.2f server calls /decision | %d nodes at 2x: admitted %d of limit %.0f = %.3f, worst 1s %d",
			r.c.Name, r.NsPerOp, r.AllocsPerOp, o.goroutines, r.Par.Latency.Quantile(0.5), r.Par.Latency.Quantile(0.99), r.Par.PerSec(),
			r.ParCmds, r.ParTrips, r.ParServerCalls, o.nodes, r.Fleet.Admitted, r.FleetLimit, r.Ratio(), r.Fleet.MaxWindow(time.Second))
	}
	return res, nil
}

func degraded(l contender.Limiter) int64 {
	if d, ok := l.(contender.Degrader); ok {
		return d.Degraded()
	}
	return 0
}

// benchKeys are the existing keys of the decision-cost measurements.
func benchKeys(o options, env contender.Env) []string {
	keys := make([]string, o.benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%suser:%d", env.Prefix, i)
	}
	return keys
}

// warm makes an instance under perfPolicy with its keys already decided once.
func warm(ctx context.Context, c contender.Contender, env contender.Env, keys []string) (contender.Limiter, error) {
	l, err := c.New(env, perfPolicy)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if _, err := l.Allow(ctx, k); err != nil {
			l.Close()
			return nil, fmt.Errorf("warming key %s: %w", k, err)
		}
	}
	return l, nil
}

// measureSerial: (a) ns/op and allocs/op of a serial decision on an
// existing key, o.count interleaved rounds, the median kept.
func measureSerial(ctx context.Context, o options, envs []contender.Env, res []*result) error {
	type run struct{ ns, allocs, bytes float64 }
	ls := make([]contender.Limiter, len(res))
	keys := make([][]string, len(res))
	defer func() {
		for _, l := range ls {
			if l != nil {
				_ = l.Close()
			}
		}
	}()
	for i, r := range res {
		keys[i] = benchKeys(o, envs[i])
		l, err := warm(ctx, r.c, envs[i], keys[i])
		if err != nil {
			return fmt.Errorf("%s: %w", r.c.Name, err)
		}
		ls[i] = l
	}
	runs := make([][]run, len(res))
	errs := make([]int64, len(res))
	for round := range o.count {
		for i, r := range res {
			l, ks := ls[i], keys[i]
			br := testing.Benchmark(func(b *testing.B) {
				b.ReportAllocs()
				for j := 0; b.Loop(); j++ {
					if _, err := l.Allow(ctx, ks[j%len(ks)]); err != nil {
						errs[i]++
					}
				}
			})
			if br.N == 0 {
				return fmt.Errorf("%s: serial benchmark did not run", r.c.Name)
			}
			n := float64(br.N)
			runs[i] = append(runs[i], run{float64(br.T.Nanoseconds()) / n, float64(br.MemAllocs) / n, float64(br.MemBytes) / n})
		}
		logf("serial round %d of %d done", round+1, o.count)
	}
	for i, r := range res {
		rs := runs[i]
		slices.SortFunc(rs, func(a, b run) int { return cmp.Compare(a.ns, b.ns) })
		med := rs[len(rs)/2]
		r.NsPerOp, r.AllocsPerOp, r.BytesPerOp = med.ns, med.allocs, med.bytes
		r.NsMin, r.NsMax = rs[0].ns, rs[len(rs)-1].ns
		r.SerialErrors = errs[i]
		if errs[i] > 0 {
			logf("%s: %d errors in the serial benchmark", r.c.Name, errs[i])
		}
	}
	return nil
}

// measureParallel: (b) latency under parallel load and (c) Redis commands
// per decision during it, on a fresh instance (the serial ones are closed,
// so no other instance talks to Redis meanwhile).
func measureParallel(ctx context.Context, o options, admin *redis.Client, env contender.Env, counter *measure.Counter, res *result) error {
	l, err := warm(ctx, res.c, env, benchKeys(o, env))
	if err != nil {
		return err
	}
	defer l.Close()
	keys := benchKeys(o, env)
	deg0 := degraded(l)
	if err := measure.ResetServerStats(ctx, admin); err != nil {
		return err
	}
	c0, t0 := counter.Snapshot()
	res.Par = measure.Parallel(ctx, l.Allow, keys, o.goroutines, o.load)
	c1, t1 := counter.Snapshot()
	st, err := measure.ReadServerStats(ctx, admin)
	if err != nil {
		return err
	}
	n := float64(res.Par.Ops)
	res.ParCmds, res.ParTrips = float64(c1-c0)/n, float64(t1-t0)/n
	res.ParServerCalls, res.ParServerUsec = float64(st.Calls)/n, float64(st.Usec)/n
	res.ParDegraded = degraded(l) - deg0
	if res.Par.Errors > 0 {
		logf("%s: %d errors under parallel load, first: %v", res.c.Name, res.Par.Errors, res.Par.FirstError)
	}
	return nil
}

// measureFleet: (d) o.nodes instances sharing one key, offered twice the
// limit for o.fleet.
func measureFleet(ctx context.Context, o options, admin *redis.Client, env contender.Env, counter *measure.Counter, idx int, res *result) error {
	env.Prefix = fmt.Sprintf("c%df:", idx)
	nodes := make([]contender.Limiter, 0, o.nodes)
	defer func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	}()
	allows := make([]measure.AllowFunc, 0, o.nodes)
	for range o.nodes {
		n, err := res.c.New(env, o.policy)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
		allows = append(allows, n.Allow)
	}
	if err := measure.ResetServerStats(ctx, admin); err != nil {
		return err
	}
	c0, t0 := counter.Snapshot()
	fr, err := measure.Fleet(ctx, allows, measure.FleetRun{
		Key:      env.Prefix + "fleet-key",
		Rate:     2 * float64(o.policy.Rate),
		Duration: o.fleet,
	})
	if err != nil {
		return err
	}
	c1, t1 := counter.Snapshot()
	st, err := measure.ReadServerStats(ctx, admin)
	if err != nil {
		return err
	}
	res.Fleet = fr
	res.FleetLimit = float64(o.policy.Rate)*o.fleet.Seconds() + float64(o.policy.Burst)
	res.FleetExactOwn = res.FleetLimit
	if res.c.FixedWindow {
		// Windows start at the key's first request (at about 1 ms): Burst
		// per window, every window of the run filled at twice the rate.
		res.FleetExactOwn = float64(o.policy.Burst) * math.Ceil(o.fleet.Seconds()/o.policy.Window().Seconds())
	}
	n := float64(fr.Offered)
	res.FleetCmds, res.FleetTrips = float64(c1-c0)/n, float64(t1-t0)/n
	res.FleetServerCalls, res.FleetServerUs = float64(st.Calls)/n, float64(st.Usec)/n
	for _, l := range nodes {
		res.FleetDegraded += degraded(l)
	}
	if fr.Errors > 0 {
		logf("%s: %d errors in the accuracy run, first: %v", res.c.Name, fr.Errors, fr.FirstError)
	}
	return nil
}
