package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/schollz/progressbar/v3"
	"gonum.org/v1/plot/plotter"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
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
}

// runTune measures, for one Redis, limit and fleet, what each sync interval
// costs and buys: over-admission, decision latency, Redis commands and Redis
// CPU, next to the synchronous mode (exact, a round trip each) and local only
// (no Redis, N times the limit). It prints a table and writes a plot, so an
// operator can pick the interval for a deployment.
func runTune(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	fs.SetOutput(out)
	addr := fs.String("redis", envRedis(), "the Redis to measure (default $REDIS_ADDR; else a private redis-server)")
	nodes := fs.Int("nodes", 4, "limiter nodes")
	rate := fs.Int64("rate", 1000, "the shared limit, requests per second")
	burst := fs.Int64("burst", 100, "the limit's burst")
	offered := fs.Float64("offered", 2, "traffic offered, as a multiple of the limit")
	intervalList := fs.String("intervals", "1ms,5ms,10ms,20ms,50ms,100ms", "sync intervals to measure, comma-separated")
	duration := fs.Duration("duration", 5*time.Second, "how long each setting runs")
	outFile := fs.String("out", "", "also write the table (Markdown) to this file")
	plotFile := fs.String("plot", "tune.svg", "write the plot here (.svg or .png); empty for none")
	progress := fs.Bool("progress", true, "show a progress bar on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	intervals, err := parseDurations(*intervalList)
	if err != nil {
		return err
	}
	lim := hybrid.PerSecond(*rate).WithBurst(*burst)
	if err := lim.Validate(); err != nil {
		return err
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

	var bar *progressbar.ProgressBar
	if *progress {
		bar = progressbar.NewOptions64(int64(len(settings))*int64(duration.Seconds()+0.5),
			progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("tune"),
			progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionSetElapsedTime(true))
	}
	fmt.Fprintf(out, "Measuring %v shared by %d nodes, %.0f requests/s offered, %v per setting, on %s.\n\n", lim, *nodes, *offered*float64(*rate), *duration, be.what)

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
		if err := tunePlot(*plotFile, rows); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nPlot: %s\n", *plotFile)
	}
	return nil
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
	var b strings.Builder
	fmt.Fprintln(&b, "| setting | admitted / limit | error | worst 1 s (bound) | p50 | p99 | Redis scripts/s | Redis commands/s | Redis CPU |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		bound := "-"
		if r.bound1s > 0 {
			bound = fmt.Sprintf("%.0f", r.bound1s)
		}
		fmt.Fprintf(&b, "| %s | %d / %.0f | %+.2f%% | %d (%s) | %v | %v | %.0f | %.0f | %.1f%% |\n", r.label, r.admitted, r.limit,
			100*(float64(r.admitted)-r.limit)/r.limit, r.worst1s, bound, r.p50.Round(time.Microsecond/10), r.p99.Round(time.Microsecond/10),
			r.evalsPerS, r.callsPerS, r.cpu)
	}
	return b.String()
}

// tunePlot draws accuracy and Redis load against the interval.
func tunePlot(path string, rows []tuneRow) error {
	var errPts, worstPts, evals, calls, cpu plotter.XYs
	var syncRow, localRow *tuneRow
	for i, r := range rows {
		switch {
		case r.interval > 0:
			ms := float64(r.interval) / float64(time.Millisecond)
			errPts = append(errPts, plotter.XY{X: ms, Y: 100 * (float64(r.admitted) - r.limit) / r.limit})
			worstPts = append(worstPts, plotter.XY{X: ms, Y: float64(r.worst1s)})
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
		return errors.New("nothing to plot: no async interval was measured")
	}
	flat := func(y float64) plotter.XYs {
		return plotter.XYs{{X: errPts[0].X, Y: y}, {X: errPts[len(errPts)-1].X, Y: y}}
	}
	accuracy := panel{title: "Over-admission against the limit", x: "sync interval (ms)", y: "admitted vs limit (%)", logX: true,
		lines: []series{{name: "async", points: errPts}}}
	load := panel{title: "Redis load", x: "sync interval (ms)", y: "per second", logX: true,
		lines: []series{{name: "commands (incl. inside scripts)", points: calls}, {name: "script calls (round trips)", points: evals}}}
	cpuPanel := panel{title: "Redis CPU", x: "sync interval (ms)", y: "% of one core", logX: true,
		lines: []series{{name: "async", points: cpu}}}
	if syncRow != nil {
		accuracy.lines = append(accuracy.lines, series{name: "sync (exact)", points: flat(100 * (float64(syncRow.admitted) - syncRow.limit) / syncRow.limit), dashed: true})
		load.lines = append(load.lines, series{name: "sync: commands", points: flat(syncRow.callsPerS), dashed: true})
		cpuPanel.lines = append(cpuPanel.lines, series{name: "sync", points: flat(syncRow.cpu), dashed: true})
	}
	_ = localRow // local only's error (N times over) would flatten the accuracy axis; it is in the table
	return savePlots(path, accuracy, load, cpuPanel)
}

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
