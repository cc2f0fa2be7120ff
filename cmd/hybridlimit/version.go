package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release this binary is, set when building one:
//
//	go build -ldflags "-X main.version=v0.1.0" ./cmd/hybridlimit
//
// Empty means the module's version from the build information (set by
// go install github.com/hybridlimit/hybridlimit/cmd/hybridlimit@v0.1.0), or
// "(devel)" for a build from a checkout.
var version = ""

// runVersion prints one line: the version, the commit it was built from
// when known, the Go version and the platform.
func runVersion(_ context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("version", out)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	fmt.Fprintln(out, versionLine())
	return nil
}

// versionLine is "hybridlimit v0.1.0 (commit 4d7cb45e1f53, 2026-11-23T13:51:58Z) go1.26.0 linux/amd64".
func versionLine() string {
	v := version
	var rev, when string
	dirty := false
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	line := "hybridlimit " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "+changes"
		}
		line += " (commit " + rev
		if when != "" {
			line += ", " + when
		}
		line += ")"
	}
	return line + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
