package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/hybridlimit/hybridlimit/rules"
)

// rulesSource is how explain and replay read a rules file, with lint's
// flags: -env and -rules-max-size.
type rulesSource struct {
	env     bool
	maxSize byteSize
}

// register defines -env and -rules-max-size on fs.
func (r *rulesSource) register(fs *flag.FlagSet) {
	r.maxSize = byteSize(rules.DefaultMaxFileSize)
	fs.BoolVar(&r.env, "env", false, "overlay the RATE_LIMIT_* environment over the rules, as the gateway does (default: the files alone)")
	fs.Var(&r.maxSize, "rules-max-size", "the largest rules file read, as the gateway's flag")
}

// check reports flags that cannot work: file, the -rules flag's value,
// is required.
func (r *rulesSource) check(cmd, file string) error {
	var errs []error
	if file == "" {
		errs = append(errs, fmt.Errorf("%s: -rules is required", cmd))
	}
	if r.maxSize <= 0 {
		errs = append(errs, fmt.Errorf("%s: -rules-max-size %v must be positive", cmd, &r.maxSize))
	}
	return errors.Join(errs...)
}

// load loads file for cmd (loadRulesFile).
func (r *rulesSource) load(cmd, file string) (*rules.Rules, error) {
	return loadRulesFile(cmd, file, r.env, int64(r.maxSize))
}

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
