package main

import (
	"context"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every usage mistake, as a shell or a CI step sees it: exit status 2, one
// line on standard error saying what was wrong, then the usage of the
// command it concerns, and nothing on standard output. Each runs the
// command as a process; none gets as far as starting anything.
func TestUsageMistakesExitTwo(t *testing.T) {
	type mistake struct {
		args  []string
		usage string // the usage line that follows
		line  string // what the one line says
	}
	cases := []mistake{
		{[]string{"bogus"}, "usage: hybridlimit <command>", `hybridlimit: unknown command "bogus"`},
		{[]string{"-x"}, "usage: hybridlimit <command>", `hybridlimit: unknown command "-x"`},
		{[]string{"demo", "-rate", "0"}, "usage: hybridlimit demo", "rate 0 must be positive"},
		{[]string{"demo", "-mode", "fast"}, "usage: hybridlimit demo", `invalid value "fast" for flag -mode: unknown mode "fast" (want async, sync or local)`},
		{[]string{"demo", "-nodes", "0"}, "usage: hybridlimit demo", "need at least one node"},
		{[]string{"tune", "-target-error", "0"}, "usage: hybridlimit tune", "-target-error 0: want a positive percentage"},
		{[]string{"tune", "-intervals", "5ms,x"}, "usage: hybridlimit tune", `tune: -intervals: interval "x"`},
		{[]string{"tune", "-plot", "tune.gif"}, "usage: hybridlimit tune", "tune: -plot tune.gif: want a .png or .svg file"},
		{[]string{"tune", "-redis-budget", "lots"}, "usage: hybridlimit tune", `invalid value "lots" for flag -redis-budget`},
		{[]string{"chaos", "-failure", "flood"}, "usage: hybridlimit chaos", `chaos: unknown failure "flood"`},
		{[]string{"chaos", "-at", "20s"}, "usage: hybridlimit chaos", "must end within the run"},
		{[]string{"chaos", "-plot", "chaos.gif"}, "usage: hybridlimit chaos", "chaos: -plot chaos.gif: want a .png or .svg file"},
		{[]string{"gateway"}, "usage: hybridlimit gateway", "gateway: -upstream is required"},
		{[]string{"gateway", "-upstream", "ftp://x"}, "usage: hybridlimit gateway", `scheme "ftp", want http or https`},
		{[]string{"gateway", "-upstream", "http://127.0.0.1:1", "-read-timeout", "-1s", "-upstream-failures", "0"}, "usage: hybridlimit gateway",
			"gateway: -read-timeout -1s is negative; gateway: -upstream-failures 0: want 1 or more"},
		{[]string{"gateway", "-upstream", "http://127.0.0.1:1", "-redis", "redis://[bad"}, "usage: hybridlimit gateway", "gateway: -redis:"},
		{[]string{"rls", "-near-limit-ratio", "2"}, "usage: hybridlimit rls", "-near-limit-ratio 2: want a fraction"},
		{[]string{"rls", "-log-level", "loud"}, "usage: hybridlimit rls", `rls: -log-level "loud"`},
		{[]string{"rls", "-redis", "a:1", "-redis-type", "ring"}, "usage: hybridlimit rls", `-redis-type "ring"`},
		{[]string{"lint"}, "usage: hybridlimit lint", "lint: no file given"},
		{[]string{"lint", "-rules-max-size", "0", "rules.yaml"}, "usage: hybridlimit lint", "lint: -rules-max-size 0 must be positive"},
		{[]string{"version", "extra"}, "usage: hybridlimit version", `version: unexpected arguments ["extra"]`},
	}
	for _, c := range commands() {
		cases = append(cases, mistake{[]string{c.name, "-nope"}, "usage: hybridlimit " + c.name, c.name + ": flag provided but not defined: -nope"})
		if c.name != "lint" && c.name != "explain" && c.name != "replay" { // their arguments are files, or a curl line
			cases = append(cases, mistake{[]string{c.name, "extra"}, "usage: hybridlimit " + c.name, c.name + `: unexpected arguments ["extra"]`})
		}
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := asProcess(t, tc.args...)
			assert.Equal(t, exitUsage, code, "stderr:\n%s", stderr)
			assert.Empty(t, stdout)
			lines := strings.Split(stderr, "\n")
			require.GreaterOrEqual(t, len(lines), 2, stderr)
			assert.True(t, strings.HasPrefix(lines[0], "hybridlimit: "), "the one line: %q", lines[0])
			assert.Contains(t, lines[0], tc.line)
			assert.True(t, strings.HasPrefix(lines[1], tc.usage), "the usage follows the one line:\n%s", stderr)
		})
	}
}

// A bare hybridlimit is a usage mistake too: the commands, on standard
// error, and exit status 2; asked for (-h, help), the same list goes to
// standard output with status 0.
func TestBareCommandListsTheCommandsAndExitsTwo(t *testing.T) {
	code, stdout, stderr := asProcess(t)
	assert.Equal(t, exitUsage, code)
	assert.Empty(t, stdout)
	assert.True(t, strings.HasPrefix(stderr, "usage: hybridlimit <command> [flags]\n"), "the list alone, no error line:\n%s", stderr)
	for _, c := range commands() {
		assert.Contains(t, stderr, "\n  "+c.name+" ", c.name)
	}
	for _, asked := range []string{"-h", "help"} {
		code, stdout, stderr = asProcess(t, asked)
		assert.Equal(t, 0, code, asked)
		assert.Empty(t, stderr, asked)
		for _, c := range commands() {
			assert.Contains(t, stdout, "\n  "+c.name+" ", "%s: %s", asked, c.name)
		}
	}
}

// Every flag of every command says what it does: a description beyond the
// environment variable it reads.
func TestEveryFlagIsDescribed(t *testing.T) {
	flagLine := regexp.MustCompile(`^  -(\S+)`)
	for _, c := range commands() {
		var out strings.Builder
		require.NoError(t, run(context.Background(), []string{c.name, "-h"}, &out), c.name)
		lines := strings.Split(out.String(), "\n")
		for i, line := range lines {
			m := flagLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			desc := ""
			if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    \t") {
				desc = strings.TrimSpace(lines[i+1])
			}
			desc = strings.TrimSpace(regexp.MustCompile(`\(env [^)]*\)`).ReplaceAllString(desc, ""))
			assert.NotEmpty(t, desc, "%s -%s has no description", c.name, m[1])
		}
	}
}

// The gateway and the rls service run side by side on one host as they
// come: no default address of one is the other's.
func TestGatewayAndRLSDefaultsDoNotCollide(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	g, err := parseGatewayFlags([]string{"-upstream", "http://127.0.0.1:9000"}, io.Discard)
	require.NoError(t, err)
	r, err := parseRLSFlags(nil, io.Discard, func(k string) (string, bool) { return "127.0.0.1", k == "DEBUG_HOST" })
	require.NoError(t, err)
	ports := map[string]string{}
	for what, addr := range map[string]string{"gateway -listen": g.listen, "gateway -admin": g.admin, "rls -grpc": r.grpcAddr, "rls -admin": r.adminAddr,
		"rls -debug (when asked for)": r.debugAddr} {
		_, port, err := net.SplitHostPort(addr)
		require.NoError(t, err, what)
		if other, taken := ports[port]; taken {
			t.Errorf("%s and %s both default to port %s", what, other, port)
		}
		ports[port] = what
	}
}

// One name per setting: the Redis every command runs against is
// $REDIS_ADDR; rls also reads envoyproxy/ratelimit's REDIS_URL, and refuses
// the two naming different servers.
func TestEveryCommandReadsREDIS_ADDR(t *testing.T) {
	t.Setenv("REDIS_ADDR", "10.0.0.9:6379")
	g, err := parseGatewayFlags([]string{"-upstream", "http://127.0.0.1:9000"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.9:6379", g.redis, "gateway")
	for _, name := range []string{"demo", "tune"} {
		var out strings.Builder
		require.NoError(t, run(context.Background(), []string{name, "-h"}, &out))
		assert.Contains(t, out.String(), `(default "10.0.0.9:6379")`, "%s -redis", name)
	}

	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	r, err := parseRLSFlags(nil, io.Discard, env("REDIS_ADDR", "10.0.0.9:6379"))
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.9:6379", r.redisURL, "rls: REDIS_ADDR")
	r, err = parseRLSFlags(nil, io.Discard, env("REDIS_URL", "10.0.0.8:6379"))
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.8:6379", r.redisURL, "rls: REDIS_URL")
	r, err = parseRLSFlags(nil, io.Discard, env("REDIS_URL", "10.0.0.8:6379", "REDIS_ADDR", "10.0.0.8:6379"))
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.8:6379", r.redisURL, "rls: both, alike")
	_, err = parseRLSFlags(nil, io.Discard, env("REDIS_URL", "10.0.0.8:6379", "REDIS_ADDR", "10.0.0.9:6379"))
	assert.ErrorContains(t, err, `REDIS_URL="10.0.0.8:6379" and REDIS_ADDR="10.0.0.9:6379" name different Redis servers`)
	assert.Equal(t, exitUsage, exitCode(err))
}
