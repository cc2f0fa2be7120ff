package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/bench/rlsrun"
)

// report is everything one run measured.
type report struct {
	o         options
	started   time.Time
	commit    string // the code measured (measure.Commit)
	took      time.Duration
	redis     string
	cpus      int
	goVersion string
	loadStart string // 1-minute load average
	loadEnd   string
	sweep     []sweepRow
	accuracy  []accuracy
	outages   []outage
	sticky    []sticky
	replicas  []replicaRun
	floods    []flood
	idles     []idle
}

func rate(r float64) string {
	if r == 0 {
		return "max"
	}
	return fmt.Sprintf("%.0f", r)
}

func calls(by map[string]int64) string {
	keys := slices.Sorted(maps.Keys(by))
	var parts []string
	for _, k := range keys {
		if by[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, by[k]))
		}
	}
	return strings.Join(parts, ", ")
}

func since(d time.Duration) string {
	switch {
	case d < 0:
		return "not within the run"
	case d == 0:
		return "< 1 s"
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}

func (r *report) write(w io.Writer) {
	o := r.o
	fmt.Fprintf(w, "# hybridlimit rls and envoyproxy/ratelimit, side by side\n\n")
	fmt.Fprintf(w, "Run %s at commit %s, %d CPUs, %s, Redis %s; took %s; load average %s at the start, %s at the end (the machine is shared). Command: `make bench-rls` (`cd bench && go run ./cmd/rlsbench%s`).\n\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), r.commit, r.cpus, r.goVersion, r.redis, r.took.Round(time.Second), r.loadStart, r.loadEnd, r.flags())
	fmt.Fprintf(w, "Both services run as child processes with the same environment variables (envoyproxy/ratelimit's), the same configuration "+
		"and one private redis-server, flushed before each run; envoyproxy/ratelimit %s at its defaults (REDIS_TIMEOUT 10 s, no local cache), "+
		"hybridlimit rls in async mode (sync interval %v). The load: %d client goroutines, each with one gRPC connection to every instance, "+
		"calls in turn to the instances, one descriptor per call, %v client timeout; the latency runs spread calls over 1,000 clients "+
		"(limit never reached), the accuracy and outage runs put every call on one key limited to %d/s. The load generator, the services "+
		"and Redis share the machine.\n\n", rlsrun.Version, o.syncInterval, o.goroutines, o.timeout, o.hotLimit)

	if len(r.sweep) > 0 {
		fmt.Fprintf(w, "## Latency and throughput\n\n")
		fmt.Fprintf(w, "Each run %v at the offered load, then one as fast as the clients go (max). Redis commands and CPU per request from INFO commandstats (commands run inside scripts included).\n\n", o.step)
		fmt.Fprintln(w, "| service | instances | offered/s | answered/s | p50 | p99 | errors | Redis commands/request | Redis µs/request |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
		for _, x := range r.sweep {
			if x.saturatedAfter {
				fmt.Fprintf(w, "| %v | %d | %s | saturated below | | | | | |\n", x.kind, x.instances, rate(x.offered))
				continue
			}
			fmt.Fprintf(w, "| %v | %d | %s | %.0f | %s | %s | %d | %.3f | %.2f |\n", x.kind, x.instances, rate(x.offered), x.st.perSec, ms(x.st.p50), ms(x.st.p99), x.st.errs, x.cmdsPerReq, x.redisUsPerReq)
		}
		fmt.Fprintf(w, "\n## p99 at the same load\n\nWhere both services answered at least 90%% of the offered load. Target: hybridlimit's p99 at most a fifth of envoyproxy/ratelimit's.\n\n")
		fmt.Fprintln(w, "| instances | offered/s | hybridlimit p99 | envoyproxy/ratelimit p99 | ratio | target met |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, ours := range r.sweep {
			if ours.kind != rlsrun.Ours || ours.offered == 0 || ours.saturatedAfter || ours.st.perSec < 0.9*ours.offered {
				continue
			}
			for _, theirs := range r.sweep {
				if theirs.kind != rlsrun.Theirs || theirs.instances != ours.instances || theirs.offered != ours.offered || theirs.saturatedAfter || theirs.st.perSec < 0.9*theirs.offered {
					continue
				}
				ratio := float64(ours.st.p99) / float64(theirs.st.p99)
				met := "yes"
				if ratio > 0.2 {
					met = "**no**"
				}
				fmt.Fprintf(w, "| %d | %s | %s | %s | %.2f | %s |\n", ours.instances, rate(ours.offered), ms(ours.st.p99), ms(theirs.st.p99), ratio, met)
			}
		}
	}
	if len(r.accuracy) > 0 {
		fmt.Fprintf(w, "\n## Accuracy across instances\n\nOne key limited to %d/s, offered twice that, spread over the instances, for %v of whole seconds (the services' windows). "+
			"An exact limiter admits 1.00 × the limit; \"worst second\" is the most admitted in one window. Redis scripts per instance per sync interval: EVAL and EVALSHA calls ÷ (instances × run ÷ %v); hybridlimit sends the scripts of a round (the fleet heartbeat and the key reports) in one pipeline: one round trip.\n\n",
			o.hotLimit, o.accuracy, o.syncInterval)
		fmt.Fprintln(w, "| service | instances | admitted ÷ limit | bound | worst second ÷ limit | errors | Redis scripts per instance per interval | Redis commands/request | Redis µs/request | Redis calls |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
		for _, a := range r.accuracy {
			lim := a.limitPerSec * float64(a.seconds)
			bound := "1 (exact)"
			if a.bound > 0 {
				bound = fmt.Sprintf("%.3f (round trip %s)", a.bound, ms(a.roundTrip))
			}
			fmt.Fprintf(w, "| %v | %d | %.3f | %s | %.3f | %d | %.2f | %.3f | %.2f | %s |\n", a.kind, a.instances, float64(a.admitted)/lim, bound, float64(a.worst)/a.limitPerSec, a.errs,
				a.callsPerInstanceTick, a.callsPerReq, a.usPerReq, calls(a.redisCalls))
		}
		fmt.Fprintf(w, "\nThe bound is docs/accuracy.md's Async bound for one-second windows without a burst, L·(1 + (1.1·I + r)·(N−1)/N), with I the sync interval and r the mean reconciliation round the instances measured (rate_limit_sync_round_duration_seconds); envoyproxy/ratelimit counts in Redis and is exact.\n")
	}
	if len(r.outages) > 0 {
		fmt.Fprintf(w, "\n## Redis killed for %v under load\n\n%d instances offered %.0f calls/s on the key limited to %d/s: %v of load, then Redis killed (SIGKILL) for %v, then restarted empty on the same port and %v more. "+
			"Errors are calls that failed (an error status or the %v client timeout): behind Envoy's `failure_mode_deny: false` each one is a request let through unlimited. "+
			"Back to normal: from that second on, every second has no error, a p99 under %v (or twice the p99 before the outage, if more: far below a call waiting on a dead Redis, above the noise of a shared machine), and admitted within 20%% of the limit.\n\n",
			o.outage, o.fleet, o.outageRate, o.hotLimit, o.before, o.outage, o.after, o.timeout, normalP99)
		fmt.Fprintln(w, "| service | errors during the outage | calls answered/s before / during | p99 before / during / after | admitted ÷ limit before / during / after | back to normal: no errors / p99 / admitted |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, x := range r.outages {
			fmt.Fprintf(w, "| %v | %d of %d | %.0f / %.0f | %s / %s / %s | %.2f / %.2f / %.2f | %s / %s / %s |\n", x.kind, x.during.errs, x.during.calls,
				x.before.perSec, x.during.perSec, ms(x.before.p99), ms(x.during.p99), ms(x.after.p99), x.admBefore, x.admDuring, x.admAfter,
				since(x.recoverErrs), since(x.recoverP99), since(x.recoverAd))
		}
		fmt.Fprintf(w, "\nCalls slower than Envoy's default timeout for the rate limit filter (%v; behind `failure_mode_deny: false` each one is a request let through), or failed, a second: before the outage / during it / the first 3 s after Redis returned / the rest after:\n\n", envoyTimeout)
		fmt.Fprintln(w, "| service | over 20 ms a second: before / during / first 3 s after / rest after |")
		fmt.Fprintln(w, "|---|---|")
		for _, x := range r.outages {
			back := o.before + o.outage
			fmt.Fprintf(w, "| %v | %.1f / %.1f / %.1f / %.1f |\n", x.kind, slowPerSec(x.samples, 0, o.before), slowPerSec(x.samples, o.before, back),
				slowPerSec(x.samples, back, back+3*time.Second), slowPerSec(x.samples, back+3*time.Second, back+o.after))
		}
		fmt.Fprintf(w, "\nPer second (admitted ÷ limit; errors; calls over 20 ms or failed):\n\n")
		fmt.Fprint(w, "| second |")
		for _, x := range r.outages {
			fmt.Fprintf(w, " %v |", x.kind)
		}
		fmt.Fprint(w, "\n|---|")
		for range r.outages {
			fmt.Fprint(w, "---|")
		}
		fmt.Fprintln(w)
		if len(r.outages) > 0 {
			for i := range r.outages[0].seconds {
				mark := ""
				switch {
				case time.Duration(i)*time.Second == o.before:
					mark = " (Redis killed)"
				case time.Duration(i)*time.Second == o.before+o.outage:
					mark = " (Redis back)"
				}
				fmt.Fprintf(w, "| %d%s |", i, mark)
				for _, x := range r.outages {
					from := time.Duration(i) * time.Second
					st := summarise(window(x.samples, from, from+time.Second), time.Second)
					fmt.Fprintf(w, " %.2f; %d; %.0f |", x.perSecond[i], st.errs, slowPerSec(x.samples, from, from+time.Second))
				}
				fmt.Fprintln(w)
			}
		}
	}
	r.writeSticky(w)
	r.writeReplicas(w)
	r.writeFlood(w)
	r.writeIdle(w)
}

// envoyTimeout is Envoy's default timeout for the rate limit filter.
const envoyTimeout = 20 * time.Millisecond

// slowPerSec is how many calls sent in [from, to) took longer than
// envoyTimeout or failed, a second.
func slowPerSec(s []sample, from, to time.Duration) float64 {
	n := 0
	for _, x := range window(s, from, to) {
		if x.err || x.lat > envoyTimeout {
			n++
		}
	}
	return float64(n) / (to - from).Seconds()
}

// flags are the run's flags that differ from the defaults, as given.
func (r *report) flags() string {
	var out []string
	flag.Visit(func(f *flag.Flag) { out = append(out, fmt.Sprintf("-%s %s", f.Name, f.Value)) })
	if len(out) == 0 {
		return ""
	}
	return " " + strings.Join(out, " ")
}

// loadAverage is the 1-minute load average, "?" where unknown.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(data)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
