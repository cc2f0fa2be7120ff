package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/hybridlimit/hybridlimit/bench/measure"
	"github.com/hybridlimit/hybridlimit/bench/rlsrun"
)

// The runs beyond latency, accuracy and the outage: sticky streams over
// several instances, a flood of long distinct values, and an idle
// instance.

// sticky is the run of new keys, each carried by streams pinned to one
// instance, as Envoys each holding one connection to a rate limit service
// host send them.
type sticky struct {
	kind      rlsrun.Kind
	instances int
	limit     int
	// perSecond[s][i] is what key i (carried by instance i) admitted in
	// second s, ÷ the limit; answered[s][i] the calls on it answered.
	perSecond, answered [][]float64
	errs                int
}

// stickyRun starts n fresh instances and offers each a key of its own,
// never seen before, limited to limit a second, at twice that, from the goroutines pinned
// to it; it counts what each key admits a second. An exact limiter admits
// the limit from the first second.
func (b *bench) stickyRun(ctx context.Context, kind rlsrun.Kind, n, limit int) (sticky, error) {
	ins, err := b.start(ctx, kind, n)
	if err != nil {
		return sticky{}, err
	}
	defer stopAll(ins)
	c, err := dial(addrs(ins), b.o.goroutines)
	if err != nil {
		return sticky{}, err
	}
	defer c.close()
	c.pinned = true
	drive(ctx, c, 1000, b.o.warm, b.o.timeout, perClient(1000), nil) // processes and connections warm, the sticky keys untouched
	keys := make([]*rlsv3.RateLimitRequest, n)
	for i := range keys {
		keys[i] = descriptorRequest(benchDomain, fmt.Sprintf("sticky-%d", limit), fmt.Sprintf("new-%d-of-%d", i, n))
	}
	secs := int(b.o.stickyFor / time.Second)
	rate := 2 * float64(limit) * float64(n)
	if err := alignedStart(ctx); err != nil {
		return sticky{}, err
	}
	// Goroutine g sends to instance g mod n: key g mod n.
	s := drive(ctx, c, rate, time.Duration(secs)*time.Second, b.o.timeout, func(g, _ int) *rlsv3.RateLimitRequest { return keys[g%n] }, nil)
	st := sticky{kind: kind, instances: n, limit: limit, perSecond: make([][]float64, secs), answered: make([][]float64, secs)}
	for i := range st.perSecond {
		st.perSecond[i], st.answered[i] = make([]float64, n), make([]float64, n)
	}
	for _, x := range s {
		sec := secondOf(x.at)
		switch {
		case x.err:
			st.errs++
		case sec < 0 || sec >= secs:
		default:
			st.answered[sec][x.inst%n] += 1 / float64(limit)
			if !x.over {
				st.perSecond[sec][x.inst%n] += 1 / float64(limit)
			}
		}
	}
	return st, nil
}

// flood is the run of long distinct descriptor values against one
// instance.
type flood struct {
	kind                 rlsrun.Kind
	values, valueBytes   int
	took                 time.Duration
	errs                 int64
	peak, end            int64 // the process's peak and final resident set, bytes
	keys, evicted, long  float64
	redisMemory          int64 // Redis used_memory at the end, bytes
	maxKeys, maxKeyBytes string
}

// floodRun offers one fresh instance values distinct descriptor values of
// valueBytes bytes each (as from a request header an attacker makes up), as
// fast as the clients go, and reads the process's memory.
func (b *bench) floodRun(ctx context.Context, kind rlsrun.Kind) (flood, error) {
	ins, err := b.start(ctx, kind, 1)
	if err != nil {
		return flood{}, err
	}
	defer stopAll(ins)
	in := ins[0]
	c, err := dial(addrs(ins), b.o.goroutines)
	if err != nil {
		return flood{}, err
	}
	defer c.close()
	f := flood{kind: kind, values: b.o.floodValues, valueBytes: b.o.floodBytes, maxKeys: "—", maxKeyBytes: "—"}
	if kind == rlsrun.Ours {
		f.maxKeys, f.maxKeyBytes = "default", "default"
	}
	filler := strings.Repeat("v", max(b.o.floodBytes-10, 0))
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := range c.by {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(b.o.floodValues) {
					return
				}
				req := descriptorRequest(benchDomain, "flood", filler+strconv.FormatInt(1_000_000_000+i, 10))
				cctx, cancel := context.WithTimeout(ctx, b.o.timeout)
				_, err := c.by[g][0].ShouldRateLimit(cctx, req)
				cancel()
				if err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	f.took, f.errs = time.Since(start), errs.Load()
	if err := ctx.Err(); err != nil {
		return f, err
	}
	p, err := in.Proc()
	if err != nil {
		return f, err
	}
	f.peak, f.end = p.HWM, p.RSS
	if kind == rlsrun.Ours {
		for _, m := range []struct {
			series string
			to     *float64
		}{{"rate_limit_keys_in_memory", &f.keys}, {"rate_limit_keys_evicted_total", &f.evicted}, {"rate_limit_long_keys_total", &f.long}} {
			if *m.to, err = in.Metric(ctx, m.series); err != nil {
				return f, err
			}
		}
	}
	info, err := b.admin.Info(ctx, "memory").Result()
	if err != nil {
		return f, err
	}
	f.redisMemory, _ = strconv.ParseInt(field(info, "used_memory"), 10, 64)
	return f, nil
}

// idle is a fleet of replicas at rest: freshly started, and again after a
// load.
type idle struct {
	kind          rlsrun.Kind
	instances     int
	fresh, loaded idleWindow
}

// idleWindow is what each replica cost over a window with no call.
type idleWindow struct {
	cpuEachSecond time.Duration // CPU time a second, the mean over the replicas
	cpuMost       time.Duration // CPU time a second of the busiest replica
	rss           int64         // resident set at the end, the largest replica's, bytes
	redisCmds     float64       // Redis commands a second (inside scripts included) ÷ replicas
	redisUsPerSec float64       // Redis CPU a second ÷ replicas, µs
}

// perReplica turns what n replicas cost over took (CPU and RSS each; the
// Redis server's commands and CPU µs in all) into an idleWindow.
func perReplica(cpu []time.Duration, rss []int64, redisCalls, redisUsec int64, took time.Duration) idleWindow {
	var w idleWindow
	n := float64(len(cpu))
	for i, c := range cpu {
		each := time.Duration(float64(c) / took.Seconds())
		w.cpuEachSecond += time.Duration(float64(each) / n)
		w.cpuMost = max(w.cpuMost, each)
		w.rss = max(w.rss, rss[i])
	}
	w.redisCmds = float64(redisCalls) / took.Seconds() / n
	w.redisUsPerSec = float64(redisUsec) / took.Seconds() / n
	return w
}

// idleRun measures n fresh replicas at rest for idleFor, then loads them
// as fast as the clients go for 10 s over 1,000 clients (each goroutine
// sending to the replicas in turn), lets them settle 5 s, and measures them
// at rest again.
func (b *bench) idleRun(ctx context.Context, kind rlsrun.Kind, n int) (idle, error) {
	ins, err := b.start(ctx, kind, n)
	if err != nil {
		return idle{}, err
	}
	defer stopAll(ins)
	procs := func() ([]rlsrun.ProcStats, error) {
		var ps []rlsrun.ProcStats
		for _, in := range ins {
			p, err := in.Proc()
			if err != nil {
				return nil, err
			}
			ps = append(ps, p)
		}
		return ps, nil
	}
	window := func() (idleWindow, error) {
		if err := sleep(ctx, 5*time.Second); err != nil { // settle
			return idleWindow{}, err
		}
		if err := measure.ResetServerStats(ctx, b.admin); err != nil {
			return idleWindow{}, err
		}
		before, err := procs()
		if err != nil {
			return idleWindow{}, err
		}
		t0 := time.Now()
		if err := sleep(ctx, b.o.idleFor); err != nil {
			return idleWindow{}, err
		}
		after, err := procs()
		if err != nil {
			return idleWindow{}, err
		}
		took := time.Since(t0)
		rs, err := measure.ReadServerStats(ctx, b.admin)
		if err != nil {
			return idleWindow{}, err
		}
		cpu, rss := make([]time.Duration, n), make([]int64, n)
		for i := range after {
			cpu[i], rss[i] = after[i].CPU-before[i].CPU, after[i].RSS
		}
		return perReplica(cpu, rss, rs.Calls, rs.Usec, took), nil
	}
	out := idle{kind: kind, instances: n}
	if out.fresh, err = window(); err != nil {
		return out, err
	}
	c, err := dial(addrs(ins), b.o.goroutines)
	if err != nil {
		return out, err
	}
	drive(ctx, c, 0, 10*time.Second, b.o.timeout, perClient(1000), nil)
	c.close()
	out.loaded, err = window()
	return out, err
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// writeSticky writes the sticky runs: admitted ÷ limit a second of each
// new key, the mean and the lowest over the keys.
func (r *report) writeSticky(w io.Writer) {
	if len(r.sticky) == 0 {
		return
	}
	o := r.o
	fmt.Fprintf(w, "\n## New keys on sticky streams\n\nEach instance carries a key of its own, never seen before, offered twice its limit, from the client goroutines pinned to it "+
		"(goroutine g sends only to instance g mod n, as each Envoy sends all its calls on its one connection to a rate limit service host). "+
		"Admitted ÷ limit in each of the first %v (whole seconds, the services' windows), the mean over the keys and, in parentheses, the lowest; an exact limiter admits 1.00 from the first second. "+
		"Below each, the calls answered ÷ limit, the same way (2.00 offered): where it is under 1.00 the load generator, not the service, fell short (the machine is shared).\n\n",
		o.stickyFor)
	fmt.Fprint(w, "| limit | service | instances | errors | |")
	secs := len(r.sticky[0].perSecond)
	for s := range secs {
		fmt.Fprintf(w, " second %d |", s)
	}
	fmt.Fprint(w, "\n|---|---|---|---|---|")
	for range secs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	row := func(by [][]float64) {
		for _, keys := range by {
			sum, low := 0.0, keys[0]
			for _, v := range keys {
				sum += v
				low = min(low, v)
			}
			fmt.Fprintf(w, " %.2f (%.2f) |", sum/float64(len(keys)), low)
		}
		fmt.Fprintln(w)
	}
	for _, st := range r.sticky {
		fmt.Fprintf(w, "| %d/s | %v | %d | %d | admitted |", st.limit, st.kind, st.instances, st.errs)
		row(st.perSecond)
		fmt.Fprint(w, "| | | | | answered |")
		row(st.answered)
	}
}

// writeFlood writes the flood runs.
func (r *report) writeFlood(w io.Writer) {
	if len(r.floods) == 0 {
		return
	}
	f0 := r.floods[0]
	fmt.Fprintf(w, "\n## A flood of long distinct values\n\nOne fresh instance offered %d distinct values of %d bytes of one descriptor (limited to 100 a minute each), as fast as the clients go; "+
		"the process's resident set at its peak and at the end (/proc VmHWM, VmRSS), Redis's used_memory at the end. hybridlimit rls at its defaults (-max-keys, -max-key-bytes).\n\n",
		f0.values, f0.valueBytes)
	fmt.Fprintln(w, "| service | took | errors | peak RSS | RSS at the end | keys held | evicted | long names digested | Redis used_memory |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, f := range r.floods {
		keys := "—"
		if f.kind == rlsrun.Ours {
			keys = fmt.Sprintf("%.0f | %.0f | %.0f", f.keys, f.evicted, f.long)
		} else {
			keys = "— | — | —"
		}
		fmt.Fprintf(w, "| %v | %s | %d | %s | %s | %s | %s |\n", f.kind, f.took.Round(100*time.Millisecond), f.errs, mib(f.peak), mib(f.end), keys, mib(f.redisMemory))
	}
}

// writeIdle writes the idle runs.
func (r *report) writeIdle(w io.Writer) {
	if len(r.idles) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Replicas at rest\n\n1, 2 and 4 replicas with no call for %v: freshly started (after 5 s to settle), then again 5 s after 10 s of load as fast as the clients go over 1,000 clients, spread over the replicas. "+
		"Each figure is a replica's: CPU from /proc/PID/stat (user and system, in steps of 10 ms), the mean over the replicas and the busiest; the largest resident set (/proc/PID/status); "+
		"the private redis-server's commands (inside scripts included, INFO commandstats) and CPU (its commands' µs) a second, ÷ the replicas.\n\n", r.o.idleFor)
	fmt.Fprintln(w, "| service | replicas | | CPU a second (busiest) | RSS | Redis commands/s | Redis CPU µs/s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, x := range r.idles {
		for _, row := range []struct {
			name string
			w    idleWindow
		}{{"fresh", x.fresh}, {"after a load", x.loaded}} {
			fmt.Fprintf(w, "| %v | %d | %s | %s (%s) | %s | %.0f | %.0f |\n", x.kind, x.instances, row.name, ms(row.w.cpuEachSecond), ms(row.w.cpuMost), mib(row.w.rss), row.w.redisCmds, row.w.redisUsPerSec)
		}
	}
}

// progress writes a progress line.
func progress(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
