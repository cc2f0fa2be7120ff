package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/schollz/progressbar/v3"
	"gonum.org/v1/plot/plotter"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/internal/workload"
)

// tuneRow is what one setting measured.
type tuneRow struct {
	label     string
	interval  time.Duration // zero for the reference rows
	admitted  int
	limit     float64 // what an exact limiter admits over the run
	worst1s   int
	bound1s   float64 // fleetsim.AsyncBound over one second (async rows)
	p50, p99  time.Duration
	evalsPerS float64 // script calls (round trips) per second
	callsPerS float64 // all commands per second, those inside scripts included
	cpu       float64 // Redis CPU, percent of one core

	// With -keys above one, the Redis columns above are of the many-keys
	// workload, and these say what it cost per decision.
	manyKeys       bool
	keysPerS       float64       // decisions per second achieved
	cpuPerDecision time.Duration // Redis CPU per decision
	cmdsPerDec     float64       // Redis commands per decision
	degraded       float64       // share of the decisions made under the fallback
}

// runTune measures, for one Redis, limit and fleet, what each sync interval
// costs and buys: over-admission, decision latency, Redis commands and Redis
// CPU, next to the synchronous mode (exact, a round trip each) and local only
// (no Redis, N times the limit). It prints a table and writes a plot, so an
// operator can pick the interval for a deployment.
func runTune(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("tune", out)
	addr := fs.String("redis", envRedis(), redisUsage)
	nodes := fs.Int("nodes", 4, "limiter nodes")
	rate := fs.Int64("rate", 1000, "the shared limit, requests per second")
	burst := fs.Int64("burst", 100, "the limit's burst")
	offered := fs.Float64("offered", 2, "traffic offered, as a multiple of the limit")
	intervalList := fs.String("intervals", "1ms,5ms,10ms,20ms,50ms,100ms", "sync intervals to measure, comma-separated")
	duration := fs.Duration("duration", 5*time.Second, "how long each setting runs")
	outFile := fs.String("out", "", "also write the table (Markdown) to this file")
	plotFile := fs.String("plot", "tune.svg", "write the plot here (.svg or .png); empty for none")
	progress := fs.Bool("progress", true, "show a progress bar on stderr")
	keys := fs.Int("keys", 1, "keys the traffic is spread over: above 1, each setting's Redis load is measured under -keys-rate decisions/s over that many keys, each under the limit")
	zipf := fs.Float64("zipf", 1.1, "skew of the keys' traffic with -keys: the key of rank k is asked for in proportion to 1/k^zipf (0: every key alike)")
	keysRate := fs.Float64("keys-rate", 0, "decisions per second over all the keys with -keys, the whole fleet (default -offered × -rate)")
	target := fs.Float64("target-error", 1, "the largest error, in percent of the limit, the recommended interval may show")
	var budget redisBudget
	fs.Var(&budget, "redis-budget", "the most Redis load the recommended interval may cost: commands per second (2000/s) or CPU, percent of one core (5%); default none")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *target <= 0 || math.IsNaN(*target) {
		return misuse(fs, fmt.Errorf("tune: -target-error %v: want a positive percentage, such as 1", *target))
	}
	intervals, err := parseDurations(*intervalList)
	if err != nil {
		return misuse(fs, fmt.Errorf("tune: -intervals: %w", err))
	}
	if *keys < 1 || *keys > workload.MaxKeys {
		return misuse(fs, fmt.Errorf("tune: -keys %d: want 1 to %d", *keys, workload.MaxKeys))
	}
	if *zipf < 0 || math.IsNaN(*zipf) || math.IsInf(*zipf, 0) {
		return misuse(fs, fmt.Errorf("tune: -zipf %v: want 0 (every key alike) or more", *zipf))
	}
	if *keysRate < 0 || math.IsNaN(*keysRate) || math.IsInf(*keysRate, 0) {
		return misuse(fs, fmt.Errorf("tune: -keys-rate %v: want a positive number of decisions per second", *keysRate))
	}
	if *keysRate == 0 {
		*keysRate = *offered * float64(*rate)
	}
	if *plotFile != "" {
		if err := checkPlotPath(*plotFile); err != nil {
			return misuse(fs, fmt.Errorf("tune: -%w", err))
		}
	}
	lim := hybrid.PerSecond(*rate).WithBurst(*burst)
	if err := lim.Validate(); err != nil {
		return misuse(fs, fmt.Errorf("tune: %w", err))
	}
	be, err := newBackend(*addr, io.Discard)
	if err != nil {
		return err
	}
	defer be.close()
	if be.addr == "" {
		return errors.New("tune measures a Redis: set -redis or REDIS_ADDR, or install redis-server")
	}
	probe := be.client()
	defer probe.Close()

	type setting struct {
		label    string
		mode     hybrid.Mode
		interval time.Duration
	}
	var settings []setting
	for _, iv := range intervals {
		settings = append(settings, setting{"async " + iv.String(), hybrid.Async, iv})
	}
	settings = append(settings, setting{"sync", hybrid.Sync, 0}, setting{"local only", hybrid.LocalOnly, 0})

	perSetting := int64(duration.Seconds() + 0.5)
	steps := int64(len(settings)) * perSetting
	if *keys > 1 {
		steps += int64(len(settings)-1) * (perSetting + 1) // the many-keys run of every setting but local only, with its warmup
	}
	var bar *progressbar.ProgressBar
	if *progress {
		bar = progressbar.NewOptions64(steps,
			progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("tune"),
			progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionSetElapsedTime(true))
	}
	fmt.Fprintf(out, "Measuring %v shared by %d nodes, %.0f requests/s offered, %v per setting, on %s.\n", lim, *nodes, *offered*float64(*rate), *duration, be.what)
	if *keys > 1 {
		fmt.Fprintf(out, "Redis load: %.0f decisions/s over %d keys (Zipf s = %g), each key under %v, measured after each setting's accuracy run.\n", *keysRate, *keys, *zipf, lim)
	}
	fmt.Fprintln(out)

	var rows []tuneRow
	for i, st := range settings {
		if bar != nil {
			bar.Describe(st.label)
		}
		cfg := hybrid.Config{Mode: st.mode, SyncInterval: st.interval, Prefix: fmt.Sprintf("tune:%d:", i)}
		fb := be
		if st.mode == hybrid.LocalOnly {
			fb = &backend{}
		}
		row, err := measure(ctx, fb, probe, cfg, *nodes, lim, *offered, *duration, func() {
			if bar != nil {
				_ = bar.Add(1)
			}
		})
		if err != nil {
			return fmt.Errorf("%s: %w", st.label, err)
		}
		row.label, row.interval = st.label, st.interval
		if *keys > 1 && st.mode != hybrid.LocalOnly {
			if bar != nil {
				bar.Describe(st.label + ", many keys")
			}
			k, err := measureKeys(ctx, be, cfg, *nodes, lim, workload.Load{Keys: *keys, Zipf: *zipf, Rate: *keysRate, Seed: 1}, *duration)
			if err != nil {
				return fmt.Errorf("%s, %d keys: %w", st.label, *keys, err)
			}
			row.withKeys(k)
			if bar != nil {
				_ = bar.Add64(perSetting + 1)
			}
		}
		if st.mode == hybrid.Async {
			row.bound1s = fleetsim.AsyncBound(float64(*rate), float64(*burst), st.interval, 5*time.Millisecond, *nodes, time.Second)
		}
		rows = append(rows, row)
	}
	if bar != nil {
		_ = bar.Finish()
	}

	table := tuneTable(rows)
	fmt.Fprint(out, table)
	if *outFile != "" {
		if err := os.WriteFile(*outFile, []byte(table), 0o644); err != nil {
			return err
		}
	}
	if *plotFile != "" {
		if err := tunePlot(*plotFile, rows, *target, budget); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nPlot: %s\n", *plotFile)
	}
	best, meeting, err := recommend(rows, *target, budget)
	if err != nil {
		return withExit(exitFailure, err)
	}
	fmt.Fprintf(out, "\nRecommended: SyncInterval %v: error %+.2f%% (target ±%g%%), %s.\n", best.interval, rowError(best), *target, budget.describe(best))
	if len(meeting) > 1 {
		var ivs []string
		for _, r := range meeting {
			ivs = append(ivs, r.interval.String())
		}
		fmt.Fprintf(out, "Intervals that meet both: %s; the longest costs Redis least.\n", strings.Join(ivs, ", "))
	}
	if *keys > 1 {
		fmt.Fprintf(out, "Error and latency measured on one key offered %g times its limit; Redis load under %.0f decisions/s over %d keys (Zipf s = %g). The error grows with the rate per key and the nodes.\n", *offered, *keysRate, *keys, *zipf)
	} else {
		fmt.Fprintf(out, "Measured for one key at this load: Redis work grows with the keys in use (measure yours with -keys and -zipf), the error with the rate per key and the nodes.\n")
	}
	return nil
}

// measureKeys runs the many-keys workload for one setting: the Redis load of
// the operator's key distribution.
func measureKeys(ctx context.Context, be *backend, cfg hybrid.Config, nodes int, lim hybrid.Limit,
	load workload.Load, d time.Duration) (*workload.Result, error) {
	// Its own client for INFO: a Redis busy with many keys answers it late,
	// and the nodes' clients give up after 200 ms.
	admin := redis.NewClient(&redis.Options{Addr: be.addr, ReadTimeout: 10 * time.Second})
	defer admin.Close()
	return workload.Run(ctx, workload.Config{
		Load: load, Nodes: nodes, Limit: lim, Mode: cfg.Mode, Interval: cfg.SyncInterval,
		Warmup: time.Second, Duration: d, Prefix: cfg.Prefix + "keys:",
		Client: be.client, Admin: admin,
	})
}

// withKeys makes r's Redis columns those of the many-keys run k.
func (r *tuneRow) withKeys(k *workload.Result) {
	secs := k.Elapsed.Seconds()
	r.manyKeys = true
	r.evalsPerS = float64(k.Redis.Scripts) / secs
	r.callsPerS = float64(k.Redis.Calls) / secs
	r.cpu = 100 * k.CPUShare()
	r.keysPerS = k.Rate()
	r.cpuPerDecision = k.CPUPerDecision()
	r.cmdsPerDec = k.CommandsPerDecision()
	r.degraded = float64(k.Sources[hybrid.Degraded]) / float64(max(k.Decisions, 1))
}

// rowError is how far a setting's admissions were from the limit, in
// percent: negative for fewer.
func rowError(r tuneRow) float64 { return 100 * (float64(r.admitted) - r.limit) / r.limit }

// redisBudget is the most Redis load an interval may cost: commands per
// second, or CPU in percent of one core. The zero value is no budget.
type redisBudget struct {
	perSecond float64 // commands per second (inside scripts included); 0: not this kind
	cpu       float64 // percent of one core; 0: not this kind
}

func (b *redisBudget) String() string {
	switch {
	case b.perSecond > 0:
		return strconv.FormatFloat(b.perSecond, 'f', -1, 64) + "/s"
	case b.cpu > 0:
		return strconv.FormatFloat(b.cpu, 'f', -1, 64) + "%"
	}
	return ""
}

func (b *redisBudget) Set(s string) error {
	num, unit := strings.TrimSpace(s), ""
	for _, u := range []string{"/s", "%"} {
		if n, ok := strings.CutSuffix(num, u); ok {
			num, unit = strings.TrimSpace(n), u
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if unit == "" || err != nil || v <= 0 || math.IsInf(v, 0) {
		return fmt.Errorf("budget %q: want commands per second such as 2000/s, or CPU such as 5%%", s)
	}
	*b = redisBudget{}
	if unit == "/s" {
		b.perSecond = v
	} else {
		b.cpu = v
	}
	return nil
}

// fits reports whether r's Redis load is within the budget.
func (b redisBudget) fits(r tuneRow) bool {
	switch {
	case b.perSecond > 0:
		return r.callsPerS <= b.perSecond
	case b.cpu > 0:
		return r.cpu <= b.cpu
	}
	return true
}

// cost is r's load in the budget's terms.
func (b redisBudget) cost(r tuneRow) string {
	if b.cpu > 0 {
		return fmt.Sprintf("%.1f%% Redis CPU", r.cpu)
	}
	return fmt.Sprintf("%.0f Redis commands/s", r.callsPerS)
}

// describe says what r costs, against the budget if there is one.
func (b redisBudget) describe(r tuneRow) string {
	if b == (redisBudget{}) {
		return fmt.Sprintf("%.0f Redis commands/s, %.1f%% Redis CPU (no -redis-budget)", r.callsPerS, r.cpu)
	}
	return fmt.Sprintf("%s (budget %s)", b.cost(r), b.String())
}

// recommend picks, among the measured async intervals, the longest whose
// error is within ±target percent and whose Redis load fits the budget:
// the cheapest for Redis that is accurate enough. meeting lists every
// interval that meets both, shortest first. When none does, the error says
// which constraint rules out what.
func recommend(rows []tuneRow, target float64, b redisBudget) (best tuneRow, meeting []tuneRow, err error) {
	var async, accurate, affordable []tuneRow
	for _, r := range rows {
		if r.interval <= 0 {
			continue
		}
		async = append(async, r)
		okErr, okLoad := math.Abs(rowError(r)) <= target, b.fits(r)
		if okErr {
			accurate = append(accurate, r)
		}
		if okLoad {
			affordable = append(affordable, r)
		}
		if okErr && okLoad {
			meeting = append(meeting, r)
		}
	}
	slices.SortFunc(meeting, func(x, y tuneRow) int { return cmp.Compare(x.interval, y.interval) })
	switch {
	case len(async) == 0:
		return tuneRow{}, nil, errors.New("tune: no async interval was measured, so none can be recommended")
	case len(meeting) > 0:
		return meeting[len(meeting)-1], meeting, nil
	case len(accurate) == 0:
		closest := slices.MinFunc(async, func(x, y tuneRow) int { return cmp.Compare(math.Abs(rowError(x)), math.Abs(rowError(y))) })
		return tuneRow{}, nil, fmt.Errorf("tune: no measured interval keeps the error within ±%g%%: the closest was %+.2f%% at %v; measure shorter intervals, or longer (-duration) for less noise", target, rowError(closest), closest.interval)
	case len(affordable) == 0:
		cheapest := slices.MinFunc(async, func(x, y tuneRow) int { return cmp.Compare(x.callsPerS+x.cpu, y.callsPerS+y.cpu) })
		return tuneRow{}, nil, fmt.Errorf("tune: no measured interval fits the Redis budget of %s: the cheapest cost %s at %v; measure longer intervals, or raise the budget", b.String(), b.cost(cheapest), cheapest.interval)
	}
	return tuneRow{}, nil, fmt.Errorf("tune: no measured interval meets both: an error within ±%g%% needs %s, the Redis budget of %s allows %s; raise the budget or loosen the target",
		target, intervalList(accurate), b.String(), intervalList(affordable))
}

// intervalList names rows' intervals: "1ms, 5ms".
func intervalList(rows []tuneRow) string {
	var ivs []string
	for _, r := range rows {
		ivs = append(ivs, r.interval.String())
	}
	return strings.Join(ivs, ", ")
}

// measure runs one setting and reads Redis's counters around it.
func measure(ctx context.Context, be *backend, probe redis.UniversalClient, cfg hybrid.Config, nodes int, lim hybrid.Limit,
	offered float64, d time.Duration, tick func()) (tuneRow, error) {
	f, err := startFleet(nodes, be, cfg)
	if err != nil {
		return tuneRow{}, err
	}
	defer f.close()
	time.Sleep(100 * time.Millisecond) // every node's first heartbeat: each sees the fleet
	before, err := redisCounters(ctx, probe)
	if err != nil {
		return tuneRow{}, err
	}
	tl, err := fleetsim.Drive(ctx, f.deciders(), fleetsim.Run{Key: "tune", Limit: lim, Duration: d, Bucket: time.Second,
		OnBucket: func(fleetsim.Bucket) { tick() }}, fleetsim.Load{Rate: offered * float64(lim.Rate)})
	if err != nil {
		return tuneRow{}, err
	}
	if tl.FirstError != nil {
		return tuneRow{}, tl.FirstError
	}
	after, err := redisCounters(ctx, probe)
	if err != nil {
		return tuneRow{}, err
	}
	worst, _ := tl.MaxWindow(time.Second)
	secs := d.Seconds()
	return tuneRow{
		admitted: tl.Total().Admitted,
		limit:    fleetsim.Limit(float64(lim.Rate)/lim.Period.Seconds(), float64(lim.Capacity()), d),
		worst1s:  worst,
		p50:      tl.Percentile(0.5), p99: tl.Percentile(0.99),
		evalsPerS: (after.evals - before.evals) / secs,
		callsPerS: (after.calls - before.calls) / secs,
		cpu:       100 * (after.cpu - before.cpu) / secs,
	}, nil
}

// counters are Redis's cumulative counters a setting is measured by.
type counters struct{ calls, evals, cpu float64 }

// redisCounters reads INFO: every command's calls, the script calls among
// them, and the CPU seconds Redis has used.
func redisCounters(ctx context.Context, c redis.UniversalClient) (counters, error) {
	info, err := c.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return counters{}, fmt.Errorf("reading INFO: %w", err)
	}
	var k counters
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "cmdstat_"):
			name, rest, _ := strings.Cut(line, ":")
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "calls="); ok {
					n, _ := strconv.ParseFloat(v, 64)
					k.calls += n
					if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
						k.evals += n
					}
				}
			}
		case strings.HasPrefix(line, "used_cpu_sys:"), strings.HasPrefix(line, "used_cpu_user:"):
			_, v, _ := strings.Cut(line, ":")
			n, _ := strconv.ParseFloat(v, 64)
			k.cpu += n
		}
	}
	return k, nil
}

func tuneTable(rows []tuneRow) string {
	many := slices.ContainsFunc(rows, func(r tuneRow) bool { return r.manyKeys })
	var b strings.Builder
	if many {
		fmt.Fprintln(&b, "| setting | admitted / limit | error | worst 1 s (bound) | p50 | p99 | many keys: decisions/s | Redis CPU / decision | Redis commands / decision | Redis scripts/s | Redis commands/s | Redis CPU |")
		fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	} else {
		fmt.Fprintln(&b, "| setting | admitted / limit | error | worst 1 s (bound) | p50 | p99 | Redis scripts/s | Redis commands/s | Redis CPU |")
		fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|")
	}
	for _, r := range rows {
		bound := "-"
		if r.bound1s > 0 {
			bound = fmt.Sprintf("%.0f", r.bound1s)
		}
		fmt.Fprintf(&b, "| %s | %d / %.0f | %+.2f%% | %d (%s) | %v | %v |", r.label, r.admitted, r.limit,
			100*(float64(r.admitted)-r.limit)/r.limit, r.worst1s, bound, r.p50.Round(time.Microsecond/10), r.p99.Round(time.Microsecond/10))
		if many {
			switch {
			case r.manyKeys:
				deg := ""
				if r.degraded > 0 {
					deg = fmt.Sprintf(" (%.0f%% degraded)", 100*r.degraded)
				}
				fmt.Fprintf(&b, " %.0f | %.2f µs%s | %.3f |", r.keysPerS, float64(r.cpuPerDecision)/float64(time.Microsecond), deg, r.cmdsPerDec)
			default:
				fmt.Fprint(&b, " - | - | - |")
			}
		}
		fmt.Fprintf(&b, " %.0f | %.0f | %.1f%% |\n", r.evalsPerS, r.callsPerS, r.cpu)
	}
	return b.String()
}

// tunePlot draws tunePanels into path.
func tunePlot(path string, rows []tuneRow, target float64, b redisBudget) error {
	panels, err := tunePanels(rows, target, b)
	if err != nil {
		return err
	}
	return savePlots(path, panels...)
}

// tunePanels are, against the interval: the admission error, decision
// latency (p99), Redis commands and Redis CPU; with sync and local only as
// reference lines where they fit, and the target and budget where given.
func tunePanels(rows []tuneRow, target float64, b redisBudget) ([]panel, error) {
	var errPts, p99, evals, calls, cpu plotter.XYs
	var syncRow, localRow *tuneRow
	for i, r := range rows {
		switch {
		case r.interval > 0:
			ms := float64(r.interval) / float64(time.Millisecond)
			errPts = append(errPts, plotter.XY{X: ms, Y: rowError(r)})
			p99 = append(p99, plotter.XY{X: ms, Y: micros(r.p99)})
			evals = append(evals, plotter.XY{X: ms, Y: r.evalsPerS})
			calls = append(calls, plotter.XY{X: ms, Y: r.callsPerS})
			cpu = append(cpu, plotter.XY{X: ms, Y: r.cpu})
		case r.label == "sync":
			syncRow = &rows[i]
		default:
			localRow = &rows[i]
		}
	}
	if len(errPts) == 0 {
		return nil, errors.New("nothing to plot: no async interval was measured")
	}
	flat := func(y float64) plotter.XYs {
		return plotter.XYs{{X: errPts[0].X, Y: y}, {X: errPts[len(errPts)-1].X, Y: y}}
	}
	var measured []float64 // the intervals: a tick at each
	for _, pt := range errPts {
		measured = append(measured, pt.X)
	}
	accuracy := panel{title: "Admission error: admitted against an exact limiter (below 0: fewer admitted)", x: "sync interval (ms)",
		y: "admitted − limit (% of limit)", logX: true, xTicks: measured,
		lines: []series{{name: "async", points: errPts, marked: true}, {name: "exact limit", points: flat(0), dashed: true}}}
	if target > 0 {
		accuracy.lines = append(accuracy.lines,
			series{name: fmt.Sprintf("target ±%g%%", target), points: flat(target), dotted: true},
			series{points: flat(-target), dotted: true})
	}
	latency := panel{title: "Decision latency, p99", x: "sync interval (ms)", y: "µs (log scale)", logX: true, logY: true, xTicks: measured,
		lines: []series{{name: "async", points: p99, marked: true}}}
	load := panel{title: "Redis load", x: "sync interval (ms)", y: "per second", logX: true, xTicks: measured,
		lines: []series{{name: "commands (incl. inside scripts)", points: calls, marked: true}, {name: "script calls (round trips)", points: evals, marked: true}}}
	cpuPanel := panel{title: "Redis CPU", x: "sync interval (ms)", y: "% of one core", logX: true, xTicks: measured,
		lines: []series{{name: "async", points: cpu, marked: true}}}
	if syncRow != nil {
		accuracy.lines = append(accuracy.lines, series{name: fmt.Sprintf("sync (measured: %+.2f%%)", rowError(*syncRow)), points: flat(rowError(*syncRow)), dashed: true, color: 1})
		latency.lines = append(latency.lines, series{name: "sync", points: flat(micros(syncRow.p99)), dashed: true})
		load.lines = append(load.lines, series{name: "sync: commands", points: flat(syncRow.callsPerS), dashed: true})
		cpuPanel.lines = append(cpuPanel.lines, series{name: "sync", points: flat(syncRow.cpu), dashed: true})
	}
	if localRow != nil {
		// Local only's error (N times over) would flatten the accuracy axis;
		// it is in the table. Its latency is the floor async is held to.
		latency.lines = append(latency.lines, series{name: "local only", points: flat(micros(localRow.p99)), dashed: true, color: 2})
	}
	switch {
	case b.perSecond > 0:
		load.lines = append(load.lines, series{name: "budget " + b.String(), points: flat(b.perSecond), dotted: true})
	case b.cpu > 0:
		cpuPanel.lines = append(cpuPanel.lines, series{name: "budget " + b.String(), points: flat(b.cpu), dotted: true})
	}
	return []panel{accuracy, latency, load, cpuPanel}, nil
}

// micros is d in microseconds, at least a nanosecond (for a log scale).
func micros(d time.Duration) float64 { return max(float64(d), 1) / float64(time.Microsecond) }

func parseDurations(list string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(list, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < time.Millisecond {
			return nil, fmt.Errorf("interval %q: want a duration of at least 1ms", f)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("no intervals")
	}
	return out, nil
}
