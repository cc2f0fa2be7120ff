package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/hybridlimit/hybridlimit/accesslog"
	"github.com/hybridlimit/hybridlimit/replay"
)

// replayOptions is replay's command line.
type replayOptions struct {
	rulesFile, compareFile string
	rulesSource
	keying
	format   accesslog.Format
	fields   accesslog.Fields
	top      int
	maxKeys  int
	exact    bool
	json     bool
	plot     string
	progress string
	logs     []string
}

// runReplay replays access logs through a rules file (and through a
// second to compare it with) on the logs' own clock, and reports who would
// have been limited, when and by which rule. Exit status: as lint's, 0
// replayed (malformed lines are counted, not fatal), 1 a rules file has
// problems, 2 a file that cannot be read or the command used wrongly.
func runReplay(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseReplayFlags(args, out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return withExit(exitUsage, err)
	}
	cfg := replay.Config{Middleware: o.keying.middleware(), APIKeyHeader: o.apiKeyHeader, Top: o.top, MaxKeys: o.maxKeys, Exact: o.exact}
	for _, file := range []string{o.rulesFile, o.compareFile} {
		if file == "" {
			continue
		}
		rs, err := o.load("replay", file)
		if err != nil {
			return err
		}
		cfg.Rules = append(cfg.Rules, replay.Rules{Name: file, Rules: rs})
	}
	readers, total, err := openLogs(o.logs, accesslog.Options{Format: o.format, Fields: o.fields})
	if err != nil {
		return withExit(exitUsage, err)
	}
	defer func() {
		for _, r := range readers {
			_ = r.Close()
		}
	}()
	rp, err := replay.New(cfg)
	if err != nil {
		return withExit(exitUsage, err)
	}
	bar := o.progressBar(total)
	merged := accesslog.NewMerge(readers...)
	var e accesslog.Entry
	for n := 0; merged.Next(&e); n++ {
		if err := rp.Add(e); err != nil {
			_, _ = rp.Finish()
			return err
		}
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				_, _ = rp.Finish()
				return fmt.Errorf("replay: stopped: %w", err)
			}
			bar.set(readers)
		}
	}
	rep, ferr := rp.Finish()
	bar.finish(readers)
	if err := merged.Err(); err != nil {
		return withExit(exitUsage, fmt.Errorf("replay: %w", err))
	}
	if ferr != nil {
		return ferr
	}
	for _, r := range readers {
		n, examples := r.Malformed()
		rep.Lines += int64(r.Lines())
		rep.Malformed += int64(n)
		for _, m := range examples {
			if len(rep.MalformedExamples) < 5 {
				rep.MalformedExamples = append(rep.MalformedExamples, m.String())
			}
		}
	}
	if o.plot != "" {
		if err := savePlots(o.plot, replayPanels(rep)...); err != nil {
			return withExit(exitUsage, fmt.Errorf("replay: -plot: %w", err))
		}
	}
	if o.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := rep.WriteText(out); err != nil {
		return err
	}
	if o.plot != "" {
		fmt.Fprintf(out, "\nwould-be 429s per minute, by rule, plotted in %s\n", o.plot)
	}
	return nil
}

func parseReplayFlags(args []string, out io.Writer) (*replayOptions, error) {
	o := &replayOptions{fields: accesslog.EnvoyFields()}
	fs := newFlagSet("replay", out)
	fs.StringVar(&o.rulesFile, "rules", "", "the rules file to replay through (required)")
	fs.StringVar(&o.compareFile, "compare", "", "a second rules file, replayed beside the first: the requests and clients answered differently")
	o.rulesSource.register(fs)
	o.keying.register(fs)
	fs.Func("format", "the logs' format: auto (each file by its first line), combined (also common) or json (default auto)", func(s string) error {
		var err error
		o.format, err = accesslog.ParseFormat(s)
		return err
	})
	fs.Func("fields", "a JSON log's field names over Envoy's: name=field,... with names time, method, path, request, status, remote_addr, x_forwarded_for, user, tier, api_key (dots reach into objects: req.path)", func(s string) error {
		var err error
		o.fields, err = accesslog.ParseFields(s, o.fields)
		return err
	})
	fs.IntVar(&o.top, "top", 10, "how many clients the report names")
	fs.IntVar(&o.maxKeys, "max-keys", 0, "the keys the replay's limiter holds, as the gateway's MaxKeys (0: 1048576)")
	fs.BoolVar(&o.exact, "exact", false, "replay the requests logged in one second (the log's resolution) all at that instant, instead of spread over it")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON, for CI")
	fs.StringVar(&o.plot, "plot", "", "plot would-be 429s per minute by rule into this .png or .svg file")
	fs.StringVar(&o.progress, "progress", "auto", "a progress bar on standard error: auto (when it is a terminal), on or off")
	if err := parseFlags(fs, args, true); err != nil {
		return nil, err
	}
	o.logs = fs.Args()
	errs := []error{o.rulesSource.check("replay", o.rulesFile)}
	if len(o.logs) == 0 {
		errs = append(errs, errors.New("replay: no log given (files, plain or gzip; - for standard input)"))
	}
	if o.top < 0 || o.maxKeys < 0 {
		errs = append(errs, fmt.Errorf("replay: -top %d and -max-keys %d must not be negative", o.top, o.maxKeys))
	}
	if o.progress != "auto" && o.progress != "on" && o.progress != "off" {
		errs = append(errs, fmt.Errorf("replay: -progress %q: want auto, on or off", o.progress))
	}
	errs = append(errs, o.keying.check("replay"))
	return o, misuse(fs, errors.Join(errs...))
}

// openLogs opens every log ("-" is standard input) and returns the total
// size of the files, for the progress bar (-1 when one has no size).
func openLogs(names []string, opts accesslog.Options) ([]*accesslog.Reader, int64, error) {
	var readers []*accesslog.Reader
	var total int64
	for _, name := range names {
		var r *accesslog.Reader
		var err error
		if name == "-" {
			r, err = accesslog.NewReader(os.Stdin, "standard input", opts)
			total = -1
		} else {
			r, err = accesslog.Open(name, opts)
			if st, serr := os.Stat(name); serr == nil && total >= 0 {
				total += st.Size()
			}
		}
		if err != nil {
			for _, r := range readers {
				_ = r.Close()
			}
			return nil, 0, fmt.Errorf("replay: %w", err)
		}
		readers = append(readers, r)
	}
	return readers, total, nil
}

// replayProgress is the progress bar of a replay, or nothing.
type replayProgress struct{ bar *progressbar.ProgressBar }

// progressBar returns the bar -progress asks for: on standard error, over
// the files' total size.
func (o *replayOptions) progressBar(total int64) replayProgress {
	show := o.progress == "on"
	if o.progress == "auto" {
		st, err := os.Stderr.Stat()
		show = err == nil && st.Mode()&os.ModeCharDevice != 0 && (total < 0 || total > 1<<20)
	}
	if !show {
		return replayProgress{}
	}
	return replayProgress{bar: newReplayBar(os.Stderr, total)}
}

// newReplayBar is a bar of total bytes (-1: unknown) that writes to w.
func newReplayBar(w io.Writer, total int64) *progressbar.ProgressBar {
	return progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionShowBytes(true),
		progressbar.OptionSetDescription("replaying"), progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionOnCompletion(func() { _, _ = io.WriteString(w, "\n") }))
}

// set moves the bar to the bytes read so far.
func (p replayProgress) set(readers []*accesslog.Reader) {
	if p.bar == nil {
		return
	}
	var n int64
	for _, r := range readers {
		n += r.BytesRead()
	}
	_ = p.bar.Set64(n)
}

// finish ends the bar.
func (p replayProgress) finish(readers []*accesslog.Reader) {
	if p.bar == nil {
		return
	}
	p.set(readers)
	_ = p.bar.Finish()
}
