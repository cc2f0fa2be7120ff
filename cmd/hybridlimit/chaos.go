package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/schollz/progressbar/v3"
	"gonum.org/v1/plot/plotter"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

// failures are what chaos can do to Redis, each with how to cause and end it.
var failures = []string{"kill", "pause", "restart", "latency"}

// recoveryGrace is how long chaos waits, after the traffic ends, for every
// node to be healthy again.
const recoveryGrace = 10 * time.Second

// runChaos runs a fleet against a redis-server this command starts, does one
// failure to it mid-run, and writes a timeline plot: what each node admitted
// per second, the global limit, and how many nodes were degraded.
func runChaos(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("chaos", out)
	failure := fs.String("failure", "kill", "what to do to Redis: "+strings.Join(failures, ", "))
	nodes := fs.Int("nodes", 3, "limiter nodes")
	rate := fs.Int64("rate", 300, "the shared limit, requests per second")
	burst := fs.Int64("burst", 30, "the limit's burst")
	offered := fs.Float64("offered", 2, "traffic offered, as a multiple of the limit")
	duration := fs.Duration("duration", 12*time.Second, "how long the run lasts")
	at := fs.Duration("at", 4*time.Second, "when the failure starts")
	lasts := fs.Duration("for", 4*time.Second, "how long it lasts (restart is instant)")
	mode := modeFlag(fs)
	plotFile := fs.String("plot", "chaos.svg", "write the timeline here (.svg or .png)")
	progress := fs.Bool("progress", true, "show a progress bar on stderr")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	lim := hybrid.PerSecond(*rate).WithBurst(*burst)
	if err := lim.Validate(); err != nil {
		return misuse(fs, fmt.Errorf("chaos: %w", err))
	}
	if *at+*lasts > *duration {
		return misuse(fs, fmt.Errorf("chaos: the failure (%v from %v) must end within the run (%v)", *lasts, *at, *duration))
	}
	if !slices.Contains(failures, *failure) {
		return misuse(fs, fmt.Errorf("chaos: unknown failure %q (want one of %s)", *failure, strings.Join(failures, ", ")))
	}
	if err := checkPlotPath(*plotFile); err != nil {
		return misuse(fs, fmt.Errorf("chaos: -%w", err))
	}

	// Always a Redis of our own: chaos kills, stops and restarts it.
	srv, err := redisproc.Start()
	if err != nil {
		return fmt.Errorf("chaos needs a redis-server of its own: %w", err)
	}
	defer srv.Close()
	be := &backend{addr: srv.Addr(), what: "a private redis-server at " + srv.Addr()}
	var start, end func() error
	switch *failure {
	case "kill":
		start, end = func() error { srv.Kill(); return nil }, srv.Restart
	case "pause":
		start, end = func() error { srv.Pause(); return nil }, func() error { srv.Resume(); return nil }
	case "restart":
		start, end = srv.Restart, func() error { return nil }
	case "latency":
		ts := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
		p := toxiproxy.NewProxy(ts, "redis", "127.0.0.1:0", srv.Addr())
		if err := p.Start(); err != nil {
			return err
		}
		defer p.Stop()
		be.addr = p.Listen
		start = func() error {
			for _, stream := range []string{"upstream", "downstream"} {
				toxic := fmt.Sprintf(`{"name":"lat_%s","type":"latency","stream":%q,"attributes":{"latency":200}}`, stream, stream)
				if _, err := p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
					return err
				}
			}
			return nil
		}
		end = func() error { p.Toxics.ResetToxics(context.Background()); return nil }
	default:
		return fmt.Errorf("unknown failure %q (want one of %s)", *failure, strings.Join(failures, ", "))
	}

	f, err := startFleet(*nodes, be, hybrid.Config{Mode: *mode, SyncInterval: 10 * time.Millisecond, Prefix: "chaos:",
		RedisTimeout: 50 * time.Millisecond, BreakerOpenFor: 300 * time.Millisecond})
	if err != nil {
		return err
	}
	defer f.close()

	fmt.Fprintf(out, "%d %s nodes share %v, %.0f requests/s offered; %s at %v for %v.\n", *nodes, *mode, lim, *offered*float64(*rate), *failure, *at, *lasts)
	var bar *progressbar.ProgressBar
	if *progress {
		bar = progressbar.NewOptions64(int64(duration.Seconds()+0.5), progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("chaos: "+*failure), progressbar.OptionClearOnFinish())
	}
	var degraded []float64 // nodes degraded at the end of each second
	faults := make(chan error, 1)
	go func() {
		t0 := time.Now()
		time.Sleep(time.Until(t0.Add(*at)))
		if err := start(); err != nil {
			faults <- err
			return
		}
		time.Sleep(time.Until(t0.Add(*at + *lasts)))
		faults <- end()
	}()
	tl, err := fleetsim.Drive(ctx, f.deciders(), fleetsim.Run{Key: "chaos", Limit: lim, Duration: *duration, Bucket: time.Second,
		OnBucket: func(fleetsim.Bucket) {
			degraded = append(degraded, float64(f.degraded()))
			if bar != nil {
				_ = bar.Add(1)
			}
		}}, fleetsim.Load{Rate: *offered * float64(*rate)})
	if err != nil {
		return err
	}
	if bar != nil {
		_ = bar.Finish()
	}
	if err := <-faults; err != nil {
		return fmt.Errorf("causing the failure: %w", err)
	}
	if tl.FirstError != nil {
		return tl.FirstError
	}

	total := tl.Total()
	fmt.Fprintf(out, "admitted %d of %d offered; %d decisions degraded; slowest p99.9 %v.\n", total.Admitted, total.Offered,
		total.Sources[hybrid.Degraded], tl.Percentile(0.999))
	// A node still probing Redis when the traffic ends (its breaker's
	// probe interval, or a busy machine's slower calls) is given up to
	// recoveryGrace more before the run counts it as not recovered.
	healthy := func() bool {
		for _, n := range f.nodes {
			if n.Degraded() {
				return false
			}
		}
		return true
	}
	ended := time.Now()
	recovered := healthy()
	for !recovered && time.Since(ended) < recoveryGrace && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		recovered = healthy()
	}
	late := ""
	if waited := time.Since(ended); recovered && waited >= 20*time.Millisecond {
		late = fmt.Sprintf(" (%v after the traffic ended)", waited.Round(time.Millisecond))
	}
	fmt.Fprintf(out, "every node healthy again at the end: %v%s\n", recovered, late)
	if err := chaosPlot(*plotFile, tl, degraded, float64(*rate), *at, *lasts, *failure); err != nil {
		return err
	}
	fmt.Fprintf(out, "Timeline: %s\n", *plotFile)
	if !recovered {
		return fmt.Errorf("some node was still degraded %v after the end of the run", recoveryGrace)
	}
	return nil
}

// chaosPlot draws admitted per second per node with the limit, and the nodes
// degraded, over the run.
func chaosPlot(path string, tl *fleetsim.Timeline, degraded []float64, rate float64, at, lasts time.Duration, failure string) error {
	perNode := make([]plotter.XYs, tl.Nodes)
	var fleet, limitLine, down plotter.XYs
	var seconds []float64 // the intervals measured: a tick at each
	for b, row := range tl.Buckets {
		x := float64(b + 1)
		seconds = append(seconds, x)
		sum := 0
		for i, n := range row {
			perNode[i] = append(perNode[i], plotter.XY{X: x, Y: float64(n.Admitted)})
			sum += n.Admitted
		}
		fleet = append(fleet, plotter.XY{X: x, Y: float64(sum)})
		limitLine = append(limitLine, plotter.XY{X: x, Y: rate})
		if b < len(degraded) {
			down = append(down, plotter.XY{X: x, Y: degraded[b]})
		}
	}
	admitted := panel{title: fmt.Sprintf("Admitted per second (%s from %v to %v)", failure, at, at+lasts), x: "second", y: "requests", xTicks: seconds}
	admitted.lines = append(admitted.lines, series{name: "fleet", points: fleet, marked: true}, series{name: "global limit", points: limitLine, dashed: true})
	for i, pts := range perNode {
		admitted.lines = append(admitted.lines, series{name: fmt.Sprintf("node %d", i+1), points: pts, marked: true})
	}
	breaker := panel{title: "Breaker: nodes degraded", x: "second", y: "nodes", xTicks: seconds,
		lines: []series{{name: "degraded (breaker not closed)", points: down, marked: true}}}
	return savePlots(path, admitted, breaker)
}
