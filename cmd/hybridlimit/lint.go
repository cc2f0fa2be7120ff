package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hybridlimit/hybridlimit/rules"
)

// runLint checks rules files as the gateway and the library load them, with
// the loader's own errors (file, line, column, field), so that a CI step
// can stop a bad file before it is deployed. Exit status: 0 when every
// file is valid, 1 when one has problems, 2 when one cannot be read or the
// command is used wrongly.
func runLint(_ context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("lint", out)
	env := fs.Bool("env", false, "overlay the RATE_LIMIT_* environment, as the gateway does (default: the files alone)")
	strict := fs.Bool("strict", false, "count warnings as problems: rules that limit nothing, which the gateway refuses without -allow-unlimited")
	maxSize := byteSize(rules.DefaultMaxFileSize)
	fs.Var(&maxSize, "rules-max-size", "the largest rules file read, as the gateway's flag: a larger one is a problem (1048576, 512KiB, 10MiB)")
	if err := parseFlags(fs, args, true); err != nil {
		return err
	}
	if maxSize <= 0 {
		return misuse(fs, fmt.Errorf("lint: -rules-max-size %v must be positive", &maxSize))
	}
	if fs.NArg() == 0 {
		return misuse(fs, errors.New("lint: no file given"))
	}
	var lookup func(string) (string, bool)
	if *env {
		lookup = os.LookupEnv
	}
	invalid, unreadable := 0, 0
	for _, file := range fs.Args() {
		rs, err := rules.LoadWith(file, rules.LoadOptions{Env: lookup, MaxFileSize: int64(maxSize)})
		switch {
		case err != nil && isConfigError(err):
			invalid++
			for line := range strings.SplitSeq(err.Error(), "\n") {
				fmt.Fprintln(out, line)
			}
		case err != nil:
			unreadable++
			fmt.Fprintln(out, err)
		case unlimited(rs) != "" && *strict:
			invalid++
			fmt.Fprintf(out, "%s: %s: every request would pass unlimited\n", file, unlimited(rs))
		case unlimited(rs) != "":
			fmt.Fprintf(out, "%s: ok, but it %s: every request would pass unlimited (the gateway refuses it without -allow-unlimited)\n", file, unlimited(rs))
		default:
			fmt.Fprintf(out, "%s: ok\n", file)
		}
	}
	n := len(fs.Args())
	switch {
	case unreadable > 0:
		return withExit(exitUsage, fmt.Errorf("lint: %d of %d files could not be read", unreadable, n))
	case invalid > 0:
		return withExit(exitFailure, fmt.Errorf("lint: %d of %d files have problems", invalid, n))
	}
	return nil
}

// isConfigError reports a problem in the configuration itself (a file over
// the size bound included, which the gateway refuses too), as opposed to a
// file that could not be read.
func isConfigError(err error) bool {
	_, ok := errors.AsType[*rules.ConfigError](err)
	_, tooLarge := errors.AsType[*rules.FileSizeError](err)
	return ok || tooLarge
}
