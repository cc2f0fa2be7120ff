package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
)

// runDemo shows several limiter nodes in one process sharing one limit
// through Redis, offered more than the limit, with a live per-second table;
// mid-run Redis goes away and comes back, so the viewer sees the nodes
// degrade to their share of the limit and recover. It ends by itself.
func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("demo", out)
	nodes := fs.Int("nodes", 3, "limiter nodes in the fleet")
	rate := fs.Int64("rate", 100, "the shared limit, requests per second")
	burst := fs.Int64("burst", 20, "the limit's burst")
	offered := fs.Float64("offered", 2, "traffic offered, as a multiple of the limit")
	duration := fs.Duration("duration", 20*time.Second, "how long the demo runs")
	downAt := fs.Duration("down-at", 7*time.Second, "when Redis goes away (0: never)")
	upAt := fs.Duration("up-at", 13*time.Second, "when Redis comes back")
	mode := modeFlag(fs)
	interval := fs.Duration("sync-interval", hybrid.DefaultSyncInterval, "async mode: time between reconciliations with Redis")
	addr := fs.String("redis", envRedis(), redisUsage)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	lim := hybrid.PerSecond(*rate).WithBurst(*burst)
	if err := lim.Validate(); err != nil {
		return misuse(fs, fmt.Errorf("demo: %w", err))
	}
	if *nodes < 1 || *offered <= 0 || *duration <= 0 {
		return misuse(fs, errors.New("demo: need at least one node, a positive offered multiple and a duration"))
	}

	be, err := newBackend(*addr, out)
	if err != nil {
		return err
	}
	defer be.close()
	fleet, err := startFleet(*nodes, be, hybrid.Config{Mode: *mode, SyncInterval: *interval, Prefix: "demo:", BreakerOpenFor: 500 * time.Millisecond})
	if err != nil {
		return err
	}
	defer fleet.close()

	fmt.Fprintf(out, "%d nodes share %v (%s mode); %.0f requests/s offered; Redis: %s\n", *nodes, lim, fleet.mode(), *offered*float64(*rate), be.what)
	if be.addr != "" && *downAt > 0 {
		fmt.Fprintf(out, "Redis goes away at %v and comes back at %v.\n", *downAt, *upAt)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "%6s %8s %9s %8s %7s %7s %9s  %s\n", "second", "offered", "admitted", "limited", "local", "remote", "degraded", "nodes degraded")

	events := make(chan string, 4)
	outaged := be.addr != "" && *downAt > 0
	if outaged {
		go outage(ctx, be, *downAt, *upAt, events)
	}
	_, err = fleetsim.Drive(ctx, fleet.deciders(), fleetsim.Run{
		Key: "demo", Limit: lim, Duration: *duration, Bucket: time.Second,
		OnBucket: func(b fleetsim.Bucket) {
			for drained := false; !drained; {
				select {
				case e := <-events:
					fmt.Fprintf(out, "-- %s\n", e)
				default:
					drained = true
				}
			}
			fmt.Fprintf(out, "%6d %8d %9d %8d %7d %7d %9d  %d of %d\n", int(b.Start/time.Second)+1, b.Offered, b.Admitted, b.Offered-b.Admitted,
				b.Sources[hybrid.Local], b.Sources[hybrid.Remote], b.Sources[hybrid.Degraded], fleet.degraded(), len(fleet.nodes))
		},
	}, fleetsim.Load{Rate: *offered * float64(*rate)})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if outaged && *upAt < *duration {
		reportRecovery(ctx, fleet, events, out)
	}
	fmt.Fprintf(out, "\nThe limit allows %d per second (and a burst of %d): ", *rate, *burst)
	fmt.Fprintln(out, "while Redis is away each node enforces its share, so the fleet stays near the limit.")
	return ctx.Err()
}

// reportRecovery tells whether every node is back on Redis. A node whose
// breaker is still waiting to probe when the table ends (or whose probes a
// busy machine slowed past RedisTimeout) is given up to recoveryGrace
// more, and the wait is shown, so the demo always ends by saying how the
// fleet came back rather than on a row caught mid-recovery.
func reportRecovery(ctx context.Context, f *fleet, events <-chan string, out io.Writer) {
	ended := time.Now()
	for f.degraded() > 0 && time.Since(ended) < recoveryGrace && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	for drained := false; !drained; {
		select {
		case e := <-events:
			fmt.Fprintf(out, "-- %s\n", e)
		default:
			drained = true
		}
	}
	waited := ""
	if w := time.Since(ended); w >= 20*time.Millisecond {
		waited = fmt.Sprintf(", %v after the table ended", w.Round(10*time.Millisecond))
	}
	if n := f.degraded(); n > 0 {
		fmt.Fprintf(out, "-- %d of %d nodes still degraded%s\n", n, len(f.nodes), waited)
		return
	}
	fmt.Fprintf(out, "-- every node is back on Redis%s\n", waited)
}

// outage takes Redis away at down and brings it back at up, telling events.
func outage(ctx context.Context, be *backend, down, up time.Duration, events chan<- string) {
	start := time.Now()
	for _, step := range []struct {
		at   time.Duration
		do   func() error
		what string
	}{{down, be.down, "Redis is gone"}, {up, be.up, "Redis is back"}} {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(step.at))):
		}
		if err := step.do(); err != nil {
			events <- fmt.Sprintf("%s failed: %v", step.what, err)
			continue
		}
		events <- fmt.Sprintf("%s (%v)", step.what, time.Since(start).Round(100*time.Millisecond))
	}
}
