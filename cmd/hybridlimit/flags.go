package main

import (
	"flag"

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
