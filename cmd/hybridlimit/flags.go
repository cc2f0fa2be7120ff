package main

import (
	"flag"
	"fmt"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// modeFlag defines -mode on fs, "async" (the default) or "sync", and
// returns where the parsed mode will be.
func modeFlag(fs *flag.FlagSet) *hybrid.Mode {
	mode := hybrid.Async
	fs.Func("mode", "async or sync (default async)", func(s string) error {
		switch s {
		case "async":
			mode = hybrid.Async
		case "sync":
			mode = hybrid.Sync
		default:
			return fmt.Errorf("unknown mode %q (want async or sync)", s)
		}
		return nil
	})
	return &mode
}
