// Command hybridlimit is what users of the hybridlimit library do with it, as
// commands. Run it without arguments for the list.
//
// Exit status: 0 when the command did what it was asked, 1 when it ran and
// failed, 2 when it was used wrongly (an unknown command or flag, a value a
// flag cannot take, an argument too many or missing: one line on standard
// error, then the command's usage) or could not read a file it was given.
// A bare hybridlimit prints the commands on standard error and exits 2;
// hybridlimit -h prints them on standard output and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// command is one subcommand: its name, what follows the name on its usage
// line, a one-sentence summary (in the command list, and in its -h), and
// what it runs.
type command struct {
	name    string
	args    string
	summary string
	run     func(ctx context.Context, args []string, out io.Writer) error
}

func commands() []command {
	return []command{
		{"demo", "[flags]", "watch a fleet share one limit through Redis, lose Redis and recover", runDemo},
		{"tune", "[flags]", "measure accuracy, latency and Redis load for each sync interval, with a plot", runTune},
		{"chaos", "[flags]", "kill, stop, restart or slow a Redis of its own under load, and plot the timeline", runChaos},
		{"gateway", "-upstream URL [flags]", "run a reverse proxy that limits requests by a rules file in front of an upstream (docs/gateway.md)", runGateway},
		{"rls", "[flags]", "serve Envoy's rate limit service (RLS v3 gRPC) from envoyproxy/ratelimit's config (docs/envoy.md)", runRLS},
		{"lint", "[flags] FILE...", "check rules files as the gateway and the library load them, for CI: exit 0 valid, 1 problems, 2 unreadable", runLint},
		{"explain", "-rules FILE [flags] [curl line]", "say what the gateway would do with one request: its client, its key, each check in order and, with -redis, each one's state now", runExplain},
		{"replay", "-rules FILE [-compare FILE] [flags] LOG...", "replay access logs through rules before they are enforced: who would have been limited, when, by which rule", runReplay},
		{"version", "", "print the version, the commit and the Go version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		report(os.Stderr, err)
		os.Exit(exitCode(err))
	}
}

// report writes err to w (standard error) as the process ends on it: a usage
// error as one line, then the usage of the command it concerns; a bare
// hybridlimit as the command list alone.
func report(w io.Writer, err error) {
	ue, misused := errors.AsType[*usageError](err)
	switch {
	case errors.Is(err, errNoCommand):
	case misused:
		fmt.Fprintln(w, "hybridlimit:", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
	default:
		fmt.Fprintln(w, "hybridlimit:", err)
	}
	if misused {
		ue.usage(w)
	}
}

// errNoCommand is a bare hybridlimit: the usage error is the command list.
var errNoCommand = errors.New("no command given")

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return &usageError{err: errNoCommand, usage: usage}
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
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
	return &usageError{err: fmt.Errorf("unknown command %q", args[0]), usage: usage}
}

func usage(out io.Writer) {
	fmt.Fprintln(out, "usage: hybridlimit <command> [flags]")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "What users of the hybridlimit rate limiter do with it; `hybridlimit <command> -h` describes each command.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(out, "  %-8s %s\n", c.name, c.summary)
	}
}

// newFlagSet returns the flag set of the command name, writing to out, whose
// -h has the same shape for every command: the usage line, the command's
// summary as a sentence, and its flags. Parse it with parseFlags.
func newFlagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	var c command
	for _, c = range commands() {
		if c.name == name {
			break
		}
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, strings.TrimSpace("usage: hybridlimit "+name+" "+c.args))
		fmt.Fprintln(w)
		fmt.Fprintln(w, sentence(c.summary))
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "flags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses a command's args with fs (from newFlagSet). -h and
// -help print the usage on the command's output and return flag.ErrHelp. A
// flag it does not know or whose value it cannot take, and any argument
// left over when the command takes none (takesArgs false), is a usage
// error (misuse).
func parseFlags(fs *flag.FlagSet, args []string, takesArgs bool) error {
	out := fs.Output()
	fs.SetOutput(io.Discard) // the flag package's own message and usage: report prints them once
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		return misuse(fs, fmt.Errorf("%s: %w", fs.Name(), err))
	case !takesArgs && fs.NArg() > 0:
		return misuse(fs, fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args()))
	}
	return nil
}

// misuse makes err (nil stays nil) a usage error of the command fs parses
// for: the process prints it on one line, then the command's usage.
func misuse(fs *flag.FlagSet, err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err: err, usage: func(w io.Writer) {
		out := fs.Output()
		fs.SetOutput(w)
		fs.Usage()
		fs.SetOutput(out)
	}}
}

// sentence is s with its first letter upper case and a full stop.
func sentence(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:] + "."
}
