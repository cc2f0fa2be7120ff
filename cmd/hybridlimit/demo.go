package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
)

// runDemo shows the local engine on the real clock: a burst of requests, of
// which the bucket's burst is admitted and the rest limited with the time to
// retry, then steady traffic above the rate, admitted at the rate.
func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(out)
	rate := fs.Int64("rate", 5, "requests per second the key may make")
	burst := fs.Int64("burst", 10, "requests the key may make at once")
	burstSize := fs.Int("burst-requests", 15, "requests sent at once")
	steady := fs.Duration("steady", 2*time.Second, "how long to send steady traffic after the burst")
	every := fs.Duration("every", 100*time.Millisecond, "the gap between steady requests")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lim := limit.PerSecond(*rate).WithBurst(*burst)
	if err := lim.Validate(); err != nil {
		return err
	}
	engine, err := local.New(local.Config{})
	if err != nil {
		return err
	}
	clk := clock.Real{}
	start := clk.Now()
	const key = "user:42"

	fmt.Fprintf(out, "limit for %s: %v\n\n", key, lim)
	fmt.Fprintf(out, "%8s  %4s  %-8s  %9s  %11s\n", "at", "req", "decision", "remaining", "retry after")
	decide := func(i int) error {
		now := clk.Now()
		res, err := engine.AllowN(now.UnixNano(), key, lim, 1)
		if err != nil {
			return err
		}
		verdict, retry := "allowed", ""
		if !res.Allowed {
			verdict, retry = "limited", res.RetryAfter.Round(time.Millisecond).String()
		}
		fmt.Fprintf(out, "%8s  %4d  %-8s  %9d  %11s\n", now.Sub(start).Round(time.Millisecond), i, verdict, res.Remaining, retry)
		return nil
	}

	fmt.Fprintf(out, "-- a burst of %d requests at once\n", *burstSize)
	for i := 1; i <= *burstSize; i++ {
		if err := decide(i); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "-- then one request every %v (%.0f/s) for %v\n", *every, float64(time.Second)/float64(*every), *steady)
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for i := *burstSize + 1; clk.Now().Sub(start) < *steady; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if err := decide(i); err != nil {
			return err
		}
	}
	return nil
}
