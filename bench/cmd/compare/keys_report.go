package main

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/bench/keyload"
	"github.com/hybridlimit/hybridlimit/internal/workload"
)

// writeKeys writes the many-keys section of the report: in bench-keys a
// summary with Async and Sync side by side for every workload, then each
// workload's table; in bench-compare W1's table, every Redis-backed
// contender in it.
func writeKeys(b *strings.Builder, o options, rs []*keysResult, floor *keyload.Result) {
	m := o.many
	fmt.Fprintf(b, "## Many keys: Redis's work and the callers' wait per decision\n\n")
	fmt.Fprintf(b, "Each workload's requests are laid out before the run (which key, which node, when, in batches every %v) and sent at their instants whatever the nodes answer (open loop): "+
		"%d workers a node call the limiter, a request waiting for a free worker in its node's queue. "+
		"Every contender gets the same requests, on the private Redis flushed before it; %v of the traffic warms the fleet, the next %v are measured "+
		"(the idle fleet: its traffic, then its rest). Our contenders run with `RedisTimeout` %v, so that a loaded machine does not send decisions to the fallback; our Async with `SyncInterval` %v.\n\n",
		keyload.DefaultTick, m.workers, m.warmup, m.duration, m.timeout, m.interval)
	fmt.Fprintf(b, "- **Redis CPU** is `used_cpu_user + used_cpu_sys` of `INFO cpu`, and **commands** the calls of `INFO commandstats` (the commands Lua scripts run included, the harness's INFO left out), "+
		"from the measured part's start to its last answer, over the decisions made in that stretch (warm-up requests still queued at its start included: "+
		"a fleet that cannot keep up answers its backlog first, and the figure is what the answers given cost). **Decisions / s** are those answers over the stretch.\n")
	fmt.Fprintf(b, "- **Latency** runs from each request's scheduled send time to its answer: the wait for a worker counts, so a limiter that keeps its callers waiting shows here (no coordinated omission); "+
		"a request never answered (its node's queue full, or still queued %v after the last was due) counts as slower than any, and a percentile that falls among those reads \"unanswered\". "+
		"**The call alone** is the limiter's own time, from the worker's call to its return.\n", m.drain)
	if floor != nil {
		fmt.Fprintf(b, "- **The harness's floor**: W1's traffic sent for %v to nodes that answer at once, in this run: latency p50 / p99 / p999 %s / %s / %s. "+
			"That much of every latency below is the machine waking a goroutine for each request, not the limiter.\n",
			floorFor, fmtQuantile(floor, 0.5), fmtQuantile(floor, 0.99), fmtQuantile(floor, 0.999))
	}
	fmt.Fprintf(b, "- **From memory**: decisions whose Source is Local and that waited on nothing: each decision is made under a context that notes whether the decision watched it for cancellation, "+
		"as every decision that waits (on Redis, on the fleet's answer to an ask) must and none made from memory does. "+
		"**Waited** counts those that did, or whose Source is Remote (every Sync decision); **asks** is Async's `Stats().Reconcile.Shares.Asks` over the decisions, which counts a request again each time it asks again.\n")
	fmt.Fprintf(b, "- **First requests**: the requests that are their key's first on their node within 10 s (60 s), computed from the stream: \"run\" looks back to the start of the warm-up "+
		"(what the fleet of the run met first), \"steady\" over %v more of the same traffic drawn before it (the same traffic after it has run for long). "+
		"A protocol that decides from a share the node holds cannot answer those from memory unless it keeps the key's share that long.\n", m.history)
	fmt.Fprintf(b, "- **Exact limiter**: one token bucket per key (GCRA in integer nanoseconds) over the requests the contender answered, at their scheduled instants, the warm-up included; "+
		"**over** sums, key by key, what the contender admitted beyond it, **under** what it admitted short of it. Sync, exact but deciding a little after the scheduled instant, shows how much timing alone moves these.\n\n")
	if o.keysOnly {
		writeKeysSummary(b, rs)
	}
	for _, kr := range rs {
		if kr.w.idle {
			writeIdle(b, kr)
		} else {
			writeKeysWorkload(b, kr)
		}
	}
}

// async and sync are a result's runs of our Async and Sync, or nil.
func (kr *keysResult) async() *keysRun {
	return kr.find(func(r *keysRun) bool { return r.c.Interval != 0 })
}
func (kr *keysResult) sync() *keysRun {
	return kr.find(func(r *keysRun) bool { return r.c.Name == "hybridlimit Sync" })
}

func (kr *keysResult) find(f func(*keysRun) bool) *keysRun {
	for _, r := range kr.runs {
		if f(r) {
			return r
		}
	}
	return nil
}

// writeKeysSummary is every workload on one line, Async and Sync side by
// side.
func writeKeysSummary(b *strings.Builder, rs []*keysResult) {
	fmt.Fprintf(b, "### Async and Sync side by side\n\n")
	fmt.Fprintf(b, "| workload | Redis CPU / decision: Async | Sync | p99 latency: Async | Sync | from memory: Async | Sync | decided / offered: Async | Sync | first requests, 10 s / 60 s (run; steady) |\n")
	fmt.Fprintf(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, kr := range rs {
		a, s := kr.async(), kr.sync()
		cell := func(r *keysRun, f func(*keysRun) string) string {
			if r == nil {
				return "—"
			}
			return f(r)
		}
		if kr.w.idle {
			idle := func(r *keysRun) string {
				return fmt.Sprintf("at rest: %.1f commands/s a node, %.2f ms CPU/s", r.idle.restCmdsPerNode(r.nodes), r.idle.restCPUPerSec())
			}
			fmt.Fprintf(b, "| %s | %s | %s | — | — | — | — | — | — | — |\n", kr.w.id, cell(a, idle), cell(s, idle))
			continue
		}
		p99 := func(r *keysRun) string { return fmtQuantile(r.res, 0.99) }
		mem := func(r *keysRun) string { return fmtMemory(r) }
		made := func(r *keysRun) string { return fmtPercent(float64(r.res.Decided) / float64(max(r.res.Offered, 1))) }
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", kr.w.id,
			cell(a, fmtCPUPerDecision), cell(s, fmtCPUPerDecision), cell(a, p99), cell(s, p99), cell(a, mem), cell(s, mem),
			cell(a, made), cell(s, made), fmtFirsts(kr.stream.Firsts))
	}
	fmt.Fprintf(b, "\n")
}

// writeKeysWorkload is one workload's table: a column a contender.
func writeKeysWorkload(b *strings.Builder, kr *keysResult) {
	s := kr.stream
	fmt.Fprintf(b, "### %s\n\n", kr.w.title)
	fmt.Fprintf(b, "What it asks: %s. %s requests offered in %v (%s/s), %s keys asked for. "+
		"First requests within 10 s / 60 s: %s in this run, %s in steady state.\n\n",
		kr.w.about, fmtCount(int64(s.Offered())), s.Duration, fmtRate(float64(s.Offered())/s.Duration.Seconds()), fmtCount(int64(keysAsked(s))),
		fmtPair(s.Firsts, s.Firsts.InRun), fmtPair(s.Firsts, s.Firsts.Steady))
	row := runTable(b, kr.runs)
	row("**Redis CPU / decision**", fmtCPUPerDecision)
	row("Redis commands / decision (scripts)", func(r *keysRun) string {
		return fmt.Sprintf("%.3f (%.3f)", r.cmdsPerDecision(), float64(r.redis.Scripts)/float64(max(r.res.Answered, 1)))
	})
	row("Redis commands / s; CPU, % of a core", func(r *keysRun) string {
		secs := max(r.window.Seconds(), 1e-9)
		return fmt.Sprintf("%s; %.1f%%", fmtRate(float64(r.redis.Calls)/secs), 100*r.redis.CPU.Seconds()/secs)
	})
	row("decided / offered", func(r *keysRun) string {
		out := fmt.Sprintf("%s / %s", fmtCount(r.res.Decided), fmtCount(r.res.Offered))
		if u := r.res.Unanswered(); u > 0 {
			out += fmt.Sprintf(" (%s shed, %s late)", fmtCount(r.res.Shed), fmtCount(r.res.Late))
		}
		return out
	})
	row("decisions / s", func(r *keysRun) string {
		return fmtRate(float64(r.res.Answered) / max(r.res.Elapsed.Seconds(), 1e-9))
	})
	row("**latency** p50 / p99 / p999", func(r *keysRun) string {
		return fmt.Sprintf("%s / %s / %s", fmtQuantile(r.res, 0.5), fmtQuantile(r.res, 0.99), fmtQuantile(r.res, 0.999))
	})
	row("the call alone, p50 / p99", func(r *keysRun) string {
		return fmt.Sprintf("%s / %s", fmtDur(r.res.Service.Quantile(0.5)), fmtDur(r.res.Service.Quantile(0.99)))
	})
	row("**from memory**", fmtMemory)
	row("Source local / remote / degraded; waited; asks", func(r *keysRun) string {
		if !r.ours {
			return "—"
		}
		d := float64(max(r.res.Decided, 1))
		src := r.res.Sources
		return fmt.Sprintf("%s / %s / %s; %s; %s", fmtPercent(float64(src[keyload.Local])/d), fmtPercent(float64(src[keyload.Remote])/d),
			fmtPercent(float64(src[keyload.Degraded])/d), fmtPercent(float64(r.res.Waited)/d), fmtPercent(float64(r.asks)/d))
	})
	row("admitted (exact limiter)", func(r *keysRun) string {
		d := float64(max(r.acc.Decided, 1))
		return fmt.Sprintf("%s (%s)", fmtPercent(float64(r.acc.Admitted)/d), fmtPercent(float64(r.acc.Exact)/d))
	})
	row("over / under the exact limiter (keys)", func(r *keysRun) string {
		return fmt.Sprintf("+%s (%s) / −%s (%s)", fmtCount(r.acc.Over), fmtCount(int64(r.acc.OverKeys)), fmtCount(r.acc.Under), fmtCount(int64(r.acc.UnderKeys)))
	})
	for d := range keyload.NumDemands {
		row(fmt.Sprintf("keys %s: decisions; waited; under / over exact", d), func(r *keysRun) string {
			c := r.demand[d]
			if c.Decided == 0 {
				return "—"
			}
			n := float64(c.Decided)
			return fmt.Sprintf("%s; %s; −%s / +%s", fmtPercent(n/float64(max(r.res.Decided, 1))), fmtPercent(float64(c.Waited)/n),
				fmtCount(c.Under), fmtCount(c.Over))
		})
	}
	row("closing: Redis CPU", closingCPU)
	fmt.Fprintf(b, "\n")
}

// writeIdle is the idle fleet's table.
func writeIdle(b *strings.Builder, kr *keysResult) {
	fmt.Fprintf(b, "### %s\n\n", kr.w.title)
	fmt.Fprintf(b, "What it asks: %s. The traffic's %s requests over %s keys leave the nodes holding keys; then nothing is sent. "+
		"\"At rest\" is from 1 s after the last answer to the end; the first second (shares given back, leases lapsing) is apart. "+
		"The same Redis, flushed, with no client but the harness: %s commands and %.2f ms of CPU a second (its own timers).\n\n",
		kr.w.about, fmtCount(int64(kr.stream.Offered())), fmtCount(int64(keysAsked(kr.stream))),
		fmtCount(int64(float64(kr.empty.Calls)/max(kr.emptyFor.Seconds(), 1e-9))), float64(kr.empty.CPU)/1e6/max(kr.emptyFor.Seconds(), 1e-9))
	row := runTable(b, kr.runs)
	row("**Redis commands / s a node, at rest**", func(r *keysRun) string { return fmt.Sprintf("**%.1f**", r.idle.restCmdsPerNode(r.nodes)) })
	row("Redis CPU at rest, ms / s", func(r *keysRun) string { return fmt.Sprintf("%.2f", r.idle.restCPUPerSec()) })
	row("at rest, by command (a second a node)", func(r *keysRun) string { return fmtByCommand(r.idle.rest, r.idle.restFor, r.nodes) })
	row("the first second: commands / s a node; CPU, ms", func(r *keysRun) string {
		return fmt.Sprintf("%.1f; %.1f", float64(r.idle.first.Calls)/r.idle.firstFor.Seconds()/float64(r.nodes), float64(r.idle.first.CPU)/1e6)
	})
	row("the traffic: decided / offered", func(r *keysRun) string {
		return fmt.Sprintf("%s / %s", fmtCount(r.res.Decided), fmtCount(r.res.Offered))
	})
	row("closing: Redis CPU", closingCPU)
	fmt.Fprintf(b, "\n")
}

// fmtByCommand lists c's commands, the most frequent first (four at
// most), a second a node.
func fmtByCommand(c workload.RedisCost, over time.Duration, nodes int) string {
	type count struct {
		name string
		n    int64
	}
	var cs []count
	for name, n := range c.ByCommand {
		cs = append(cs, count{name, n})
	}
	slices.SortFunc(cs, func(a, b count) int {
		if a.n != b.n {
			return cmp.Compare(b.n, a.n)
		}
		return cmp.Compare(a.name, b.name)
	})
	var parts []string
	for _, x := range cs[:min(len(cs), 4)] {
		parts = append(parts, fmt.Sprintf("%s %.1f", x.name, float64(x.n)/over.Seconds()/float64(max(nodes, 1))))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// runTable writes the header of a table with a column a run, and returns
// the function that writes a row: its name, then f of each run.
func runTable(b *strings.Builder, runs []*keysRun) func(name string, f func(*keysRun) string) {
	fmt.Fprintf(b, "| |")
	for _, r := range runs {
		fmt.Fprintf(b, " %s |", r.c.Name)
	}
	fmt.Fprintf(b, "\n|---|%s\n", strings.Repeat("---:|", len(runs)))
	return func(name string, f func(*keysRun) string) {
		fmt.Fprintf(b, "| %s |", name)
		for _, r := range runs {
			fmt.Fprintf(b, " %s |", f(r))
		}
		fmt.Fprintf(b, "\n")
	}
}

func closingCPU(r *keysRun) string { return r.close.CPU.Round(time.Millisecond).String() }

// keysAsked is how many keys the measured part asks for.
func keysAsked(s *keyload.Stream) int {
	seen := make([]bool, s.Spec.Keys)
	n := 0
	for _, r := range s.Requests[s.Measured:] {
		if !seen[r.Key] {
			seen[r.Key] = true
			n++
		}
	}
	return n
}

func fmtCPUPerDecision(r *keysRun) string {
	cpu := fmt.Sprintf("**%.2f µs**", float64(r.cpuPerDecision())/1e3)
	if share := float64(r.res.Sources[keyload.Degraded]) / float64(max(r.res.Decided, 1)); share > 0.01 {
		// Decisions made under the fallback cost Redis nothing: the figure
		// is not the contender's cost per decision.
		return fmt.Sprintf("not measured: %.0f%% degraded (%.2f µs)", 100*share, float64(r.cpuPerDecision())/1e3)
	}
	return cpu
}

func fmtMemory(r *keysRun) string {
	m, ok := r.fromMemory()
	if !ok {
		return "—"
	}
	return fmtPercent(m)
}

// fmtQuantile is the latency at q over every offered request.
func fmtQuantile(r *keyload.Result, q float64) string {
	d, ok := r.Quantile(q)
	if !ok {
		return "unanswered"
	}
	return fmtDur(d)
}

// fmtFirsts is the first-request shares, in the run and steady.
func fmtFirsts(f keyload.Firsts) string {
	return fmt.Sprintf("%s; %s", fmtPair(f, f.InRun), fmtPair(f, f.Steady))
}

func fmtPair(f keyload.Firsts, c [len(keyload.Windows)]int64) string {
	return fmt.Sprintf("%s / %s", fmtPercent(f.Share(c[0])), fmtPercent(f.Share(c[1])))
}

// fmtPercent writes a share with one decimal, or two below 1%.
func fmtPercent(v float64) string {
	switch {
	case v == 0:
		return "0%"
	case v < 0.01:
		return fmt.Sprintf("%.2f%%", 100*v)
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

// fmtCount writes n with thousands separated by commas.
func fmtCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
