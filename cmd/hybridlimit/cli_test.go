package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/rules"
)

// asProcess runs the test binary as `hybridlimit args...` and returns its exit
// status, standard output and standard error.
func asProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(args, "\n"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	require.NoError(t, err)
	return 0, out.String(), errOut.String()
}

func TestHelpExitsZero(t *testing.T) {
	for _, c := range commands() {
		for _, flag := range []string{"-h", "--help"} {
			var out bytes.Buffer
			assert.NoError(t, run(context.Background(), []string{c.name, flag}, &out), "%s %s", c.name, flag)
			assert.Contains(t, strings.ToLower(out.String()), "usage", "%s %s prints its usage", c.name, flag)
		}
	}
	// And as a process, as a shell or a CI step sees it.
	code, stdout, stderr := asProcess(t, "gateway", "--help")
	assert.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "help requested")
	assert.Contains(t, stdout, "-upstream-timeout")
	code, stdout, _ = asProcess(t, "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "lint")
	code, _, stderr = asProcess(t, "nope")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `unknown command "nope"`)
}

// Every command's -h has one shape: the usage line, a blank line, one
// sentence saying what the command does, and the flags when it has any.
func TestHelpHasOneShape(t *testing.T) {
	for _, c := range commands() {
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), []string{c.name, "-h"}, &out), c.name)
		lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		require.GreaterOrEqual(t, len(lines), 3, "%s -h:\n%s", c.name, out.String())
		assert.Regexp(t, `^usage: hybridlimit `+c.name+`( |$)`, lines[0], c.name)
		assert.Empty(t, lines[1], c.name)
		assert.Regexp(t, `^[A-Z][^\n]*\.$`, lines[2], "%s: one sentence", c.name)
		if len(lines) > 3 {
			assert.Equal(t, []string{"", "flags:"}, lines[3:5], c.name)
			assert.Regexp(t, `^  -`, lines[5], c.name)
		}
	}
}

func TestVersion(t *testing.T) {
	line := regexp.MustCompile(`^hybridlimit \S+( \(commit [0-9a-f]{1,12}(\+changes)?(, \S+)?\))? go\S+ \S+/\S+\n$`)
	code, stdout, _ := asProcess(t, "version")
	assert.Equal(t, 0, code)
	assert.Regexp(t, line, stdout)
	assert.Contains(t, stdout, runtime.Version())
	for _, alias := range []string{"--version", "-version"} {
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), []string{alias}, &out))
		assert.Equal(t, stdout, out.String(), alias)
	}
	old := version
	version = "v0.1.0"
	defer func() { version = old }()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"version"}, &out))
	assert.True(t, strings.HasPrefix(out.String(), "hybridlimit v0.1.0 "), out.String())
	assert.Equal(t, exitUsage, exitCode(run(context.Background(), []string{"version", "extra"}, &out)))
}

func TestLint(t *testing.T) {
	dir := t.TempDir()
	write := func(name, yaml string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(yaml), 0o644))
		return path
	}
	good := write("good.yaml", "rate_limits:\n  default: {requests: 100, window: 60}\n  endpoints:\n    /api/search: {requests: 10, window: 1m}\n")
	bad := write("bad.yaml", "rate_limits:\n  default: {requests: 100, window: 60}\n  endpoints:\n    /api/search: {requests: -5, window: 1m}\n    /api/*/x: {requests: 1, window: 1}\n")
	banOnly := write("ban.yaml", "rate_limits:\n  ban: [203.0.113.0/24]\n")
	broken := write("broken.yaml", "rate_limits: [\n")
	large := write("large.yaml", largeRules(rules.DefaultMaxFileSize+1))

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout []string // lines (or parts of lines) expected on stdout
	}{
		{"valid", []string{good}, 0, []string{good + ": ok"}},
		{"problems, with the loader's errors", []string{good, bad}, 1, []string{
			good + ": ok",
			"rules: " + bad + ": line 4, column 29: rate_limits.endpoints./api/search.requests: must be positive, got -5",
			"rules: " + bad + ": line 5, column 5: rate_limits.endpoints./api/*/x:",
		}},
		{"broken YAML", []string{broken}, 1, []string{"rules: " + broken + ": line "}},
		{"limits nothing: a warning", []string{banOnly}, 0, []string{banOnly + ": ok, but it sets no limit"}},
		{"limits nothing, strict: a problem", []string{"-strict", banOnly}, 1, []string{banOnly + ": sets no limit"}},
		{"a file that cannot be read", []string{good, filepath.Join(dir, "missing.yaml")}, 2, []string{"no such file"}},
		{"over the size bound: a problem", []string{good, large}, 1, []string{
			good + ": ok",
			"rules: " + large + ": the file is over the size bound of 1 MiB (1048576 bytes) on a rules file: it is 1.0 MiB (1048577 bytes)",
		}},
		{"under a bound set higher", []string{"-rules-max-size", "2MiB", large}, 0, []string{large + ": ok"}},
		{"over a bound set lower", []string{"-rules-max-size", "100B", good}, 1, []string{"over the size bound of 100 B"}},
		{"a bound of nothing", []string{"-rules-max-size", "0", good}, 2, nil},
		{"no file", nil, 2, nil},
		{"a bad flag", []string{"-nope", good}, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := asProcess(t, append([]string{"lint"}, tc.args...)...)
			assert.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			for _, want := range tc.stdout {
				assert.Contains(t, stdout, want)
			}
		})
	}
}

func TestLintRefusesABoundOfNothing(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"lint", "-rules-max-size", "0", "rules.yaml"}, &out)
	assert.Equal(t, exitUsage, exitCode(err))
	assert.ErrorContains(t, err, "lint: -rules-max-size 0 must be positive")
}

// largeRules is a valid rules file of size bytes: a default rule, a few
// endpoint rules, and a comment to pad it to the byte (cheaper to parse
// than a megabyte of rules, which takes seconds under the race detector).
func largeRules(size int) string {
	var b strings.Builder
	b.WriteString("rate_limits:\n  default: {requests: 100, window: 60}\n  endpoints:\n")
	for i := range 10 {
		fmt.Fprintf(&b, "    /api/v1/resource%d: {requests: 10, window: 60}\n", i)
	}
	b.WriteString("#" + strings.Repeat("x", size-b.Len()-2) + "\n")
	return b.String()
}

// lint -env checks the file overlaid with the environment, as the gateway
// loads it.
func TestLintWithTheEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte("rate_limits:\n  default: {requests: 100, window: 60}\n"), 0o644))
	t.Setenv("RATE_LIMIT_DEFAULT", "-3")
	var out bytes.Buffer
	assert.NoError(t, run(context.Background(), []string{"lint", path}, &out), "the file alone is valid")
	out.Reset()
	err := run(context.Background(), []string{"lint", "-env", path}, &out)
	assert.Equal(t, exitFailure, exitCode(err))
	assert.Contains(t, out.String(), `RATE_LIMIT_DEFAULT="-3"`)
}
