package main

import (
	"fmt"
	"os"

	"github.com/hybridlimit/hybridlimit/rules"
)

// loadRulesFile loads a rules file for the command cmd as lint checks it
// (the file alone, or with the RATE_LIMIT_* environment over it), with
// lint's exit statuses: a file with problems exits 1, one that cannot be
// read exits 2.
func loadRulesFile(cmd, file string, env bool, maxSize int64) (*rules.Rules, error) {
	var lookup func(string) (string, bool)
	if env {
		lookup = os.LookupEnv
	}
	rs, err := rules.LoadWith(file, rules.LoadOptions{Env: lookup, MaxFileSize: maxSize})
	switch {
	case err != nil && isConfigError(err):
		return nil, withExit(exitFailure, fmt.Errorf("%s: the rules have problems (hybridlimit lint %s says the same):\n%w", cmd, file, err))
	case err != nil:
		return nil, withExit(exitUsage, fmt.Errorf("%s: %w", cmd, err))
	}
	return rs, nil
}
