// Command hybridlimit is what users of the hybridlimit library do with it, as
// commands. Run it without arguments for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand: its name, a line of help, and what it runs.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, out io.Writer) error
}

func commands() []command {
	return []command{
		{"demo", "watch a fleet share one limit through Redis, lose Redis and recover", runDemo},
		{"tune", "measure accuracy, latency and Redis load for each sync interval, with a plot", runTune},
		{"chaos", "kill, stop, restart or slow a Redis of its own under load, and plot the timeline", runChaos},
		{"gateway", "a reverse proxy with the limiter and a rules file in front of an upstream", runGateway},
		{"rls", "Envoy's rate limit service (RLS v3 gRPC) with envoyproxy/ratelimit's config", runRLS},
		{"lint", "check rules files as the gateway and the library load them, for CI", runLint},
		{"version", "print the version, the commit and the Go version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hybridlimit:", err)
		os.Exit(exitCode(err))
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(out)
		return nil
	}
	if args[0] == "-version" || args[0] == "--version" {
		args = []string{"version"}
	}
	for _, c := range commands() {
		if c.name == args[0] {
			if err := c.run(ctx, args[1:], out); !errors.Is(err, flag.ErrHelp) {
				return err
			}
			return nil // -h, -help: the usage was asked for, and printed
		}
	}
	usage(out)
	return fmt.Errorf("unknown command %q", args[0])
}

func usage(out io.Writer) {
	fmt.Fprintln(out, "usage: hybridlimit <command> [flags]")
	fmt.Fprintln(out)
	for _, c := range commands() {
		fmt.Fprintf(out, "  %-8s %s\n", c.name, c.summary)
	}
}
