package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// modeUsage describes -mode alike in every command.
const modeUsage = "async (decide in memory, reconcile through Redis; the default), sync (decide in Redis) or local (no Redis)"

// modeFlag defines -mode on fs, the limiter's mode by the names parseMode
// reads, and returns where the parsed mode will be.
func modeFlag(fs *flag.FlagSet) *hybrid.Mode {
	mode := hybrid.Async
	fs.Func("mode", modeUsage, func(s string) error {
		m, err := parseMode(s)
		mode = m
		return err
	})
	return &mode
}

// parseMode reads a mode as every command names it: async, sync or local
// (also localonly, local-only), in any case.
func parseMode(v string) (hybrid.Mode, error) {
	switch strings.ToLower(v) {
	case "async":
		return hybrid.Async, nil
	case "sync":
		return hybrid.Sync, nil
	case "local", "localonly", "local-only":
		return hybrid.LocalOnly, nil
	}
	return hybrid.Async, fmt.Errorf("unknown mode %q (want async, sync or local)", v)
}
