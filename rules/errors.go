package rules

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ConfigError is one problem with a configuration: where it is (a file line
// and column, or an environment variable and its value), the field's path
// such as "rate_limits.endpoints./api/v1/search.requests", and what is wrong.
// Its message reads
//
//	rules: line 7, column 17: rate_limits.endpoints./api/v1/search.requests: must be positive, got -5
//
// Parse, FromEnv, Validate and Compile return every ConfigError they find
// (up to MaxErrors) joined with errors.Join; errors.As finds the first.
type ConfigError struct {
	// File is the file's path when the configuration was read from one.
	File string
	// Line and Column are 1-based; zero when unknown.
	Line, Column int
	// Env is the environment variable the value came from, "" if none.
	Env string
	// Value is the value as written, when there is one.
	Value string
	// Path names the field, from rate_limits down; "" for a whole-document
	// problem such as broken YAML.
	Path string
	// Msg says what is wrong.
	Msg string
	// Err is the underlying error, such as one wrapping
	// limit.ErrInvalidLimit, or nil.
	Err error
}

// MaxErrors caps how many errors one configuration reports; the rest are
// counted in a final error.
const MaxErrors = 20

// Error formats the error as "rules: <where>: <path>: <msg>".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("rules: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	switch {
	case e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Env != "" {
		fmt.Fprintf(&b, "%s=%s: ", e.Env, quote(e.Value))
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error.
func (e *ConfigError) Unwrap() error { return e.Err }

// problems collects ConfigErrors in the order they are found.
type problems struct {
	list []*ConfigError
}

// add records a problem at o with the message built from format and args.
func (p *problems) add(o origin, path, format string, args ...any) {
	p.addErr(o, path, nil, format, args...)
}

// addErr is add with an underlying error.
func (p *problems) addErr(o origin, path string, err error, format string, args ...any) {
	e := &ConfigError{Line: o.line, Column: o.col, Env: o.env, Path: path, Msg: fmt.Sprintf(format, args...), Err: err}
	if o.env != "" {
		e.Value = o.raw
	}
	p.list = append(p.list, e)
}

// err joins the problems, ordered by position (problems without a line keep
// their order, after those with one), capped at MaxErrors; nil if none.
func (p *problems) err(file string) error {
	if len(p.list) == 0 {
		return nil
	}
	slices.SortStableFunc(p.list, func(a, b *ConfigError) int {
		if (a.Line == 0) != (b.Line == 0) {
			if a.Line == 0 {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	n := min(len(p.list), MaxErrors)
	errs := make([]error, 0, n+1)
	for _, e := range p.list[:n] {
		e.File = file
		errs = append(errs, e)
	}
	if more := len(p.list) - n; more > 0 {
		errs = append(errs, fmt.Errorf("rules: %d more errors not shown", more))
	}
	return errors.Join(errs...)
}

// quotedMax is how much of a value quote shows.
const quotedMax = 64

// quote quotes a value as written for an error message, cut to its first
// quotedMax bytes (and its length) when longer: an environment variable may
// hold 128 KiB, which a log line should not.
func quote(v string) string {
	if len(v) <= quotedMax {
		return strconv.Quote(v)
	}
	cut := quotedMax
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(v[:cut]), len(v))
}

// fieldPath appends a map key to a field path, quoting keys that would
// otherwise read ambiguously (empty, or holding dots, spaces or quotes).
func fieldPath(parent, key string) string {
	if key == "" || strings.ContainsAny(key, ". \t\n\r\"'") || !strconv.CanBackquote(key) {
		key = strconv.Quote(key)
	}
	return parent + "." + key
}
