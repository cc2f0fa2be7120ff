package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/accesslog"
	"github.com/hybridlimit/hybridlimit/replay"
)

// smallLog is a minute of a Combined log behind a proxy at 10.0.0.2: a
// client that keeps within its limit, one that does not, and two lines
// that are not log lines.
func smallLog() string {
	var b strings.Builder
	for s := range 60 {
		fmt.Fprintf(&b, "10.0.0.2 - - [10/Oct/2026:09:00:%02d +0000] \"GET /api/items HTTP/1.1\" 200 12 \"-\" \"ok/1.0\" \"198.51.100.1\"\n", s)
		for range 3 {
			fmt.Fprintf(&b, "10.0.0.2 - - [10/Oct/2026:09:00:%02d +0000] \"GET /api/search?q=x HTTP/1.1\" 200 12 \"-\" \"bot/1.0\" \"203.0.113.66\"\n", s)
		}
		if s == 20 {
			b.WriteString("this is not a log line\n")
		}
		if s == 40 {
			b.WriteString("10.0.0.2 - - [10/Oct/2026:09:00:40 +0000] \"-\" 400 0 \"-\" \"-\" \"-\"\n")
		}
	}
	return b.String()
}

const replayRules = `rate_limits:
  per_ip: {requests: 100, window: 1m}
  endpoints:
    /api/search: {requests: 60, window: 1m}
`

const replayProposal = `rate_limits:
  per_ip: {requests: 100, window: 1m}
  endpoints:
    /api/search: {requests: 30, window: 1m}
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func gzipped(t *testing.T, content string) []byte {
	t.Helper()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, err := zw.Write([]byte(content))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return z.Bytes()
}

// replay reads a log plain or gzip-compressed, counts and shows malformed
// lines with their line numbers without stopping, reports per rule and per
// client, compares two rules files, and plots.
func TestReplayCommand(t *testing.T) {
	rulesPath, proposal := writeFile(t, "rules.yaml", replayRules), writeFile(t, "proposal.yaml", replayProposal)
	logPath := writeFile(t, "access.log", smallLog())
	zipped := filepath.Join(t.TempDir(), "access.log.1.gz")
	require.NoError(t, os.WriteFile(zipped, gzipped(t, smallLog()), 0o644))
	plot := filepath.Join(t.TempDir(), "replay.png")

	for _, log := range []string{logPath, zipped} {
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), []string{"replay", "-rules", rulesPath, "-trusted-proxies", "10.0.0.0/8", log}, &out))
		text := out.String()
		for _, want := range []string{
			"Replayed 240 requests from 242 lines",
			"2 lines malformed, not replayed; the first:",
			log + ":85: no [time]: this is not a log line",
			log + ":166: request line",
			// 60 of the bot's 180 pass as the burst, one a second more.
			"passed 179, limited (429) 61",
			"endpoint:/api/search  60/1m0s burst 60 token_bucket    180      61      61",
			"First minute with a would-be 429: 2026-10-10 09:00 UTC, 61 (endpoint:/api/search 61)",
			"ip:203.0.113.66  180       61",
		} {
			assert.Contains(t, text, want, log)
		}
	}

	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"replay", "-rules", rulesPath, "-compare", proposal, "-trusted-proxies", "10.0.0.0/8",
		"-json", "-plot", plot, logPath}, &out))
	var rep replay.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	require.Len(t, rep.Runs, 2)
	assert.Equal(t, int64(2), rep.Malformed)
	assert.Equal(t, int64(60+59), rep.Runs[1].Outcomes.Passed, "the proposal admits the other client's 60, and of the bot's 180 its burst of 30 and one every 2 s")
	require.NotNil(t, rep.Changes)
	assert.Equal(t, int64(119-59), rep.Changes.NewlyRefused)
	assert.Zero(t, rep.Changes.NewlyAdmitted)
	require.NotEmpty(t, rep.Changes.Clients)
	assert.Equal(t, "ip:203.0.113.66", rep.Changes.Clients[0].Client)
	st, err := os.Stat(plot)
	require.NoError(t, err)
	assert.Positive(t, st.Size())
}

// replay's exit statuses are lint's: 0 replayed, malformed lines and all;
// 1 a rules file has problems; 2 a log or rules file that cannot be read
// (a gzip stream cut short among them), or the command used wrongly.
func TestReplayExitStatuses(t *testing.T) {
	good := writeFile(t, "rules.yaml", replayRules)
	bad := writeFile(t, "bad.yaml", "rate_limits:\n  per_ip: {requests: 0, window: 1m}\n")
	log := writeFile(t, "access.log", smallLog())
	garbage := writeFile(t, "garbage.log", "no\nlog\nhere\n")
	cut := filepath.Join(t.TempDir(), "cut.log.gz")
	z := gzipped(t, strings.Repeat(smallLog(), 20))
	require.NoError(t, os.WriteFile(cut, z[:len(z)/2], 0o644))
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		output string
	}{
		{"replayed", []string{"-rules", good, log}, 0, "Replayed 240 requests"},
		{"nothing but malformed lines", []string{"-rules", good, garbage}, 0, "3 lines malformed"},
		{"the rules have problems", []string{"-rules", good, "-compare", bad, log}, 1, "must be positive"},
		{"the rules cannot be read", []string{"-rules", good + ".missing", log}, 2, "no such file"},
		{"a log that cannot be read", []string{"-rules", good, log, log + ".missing"}, 2, "access.log.missing"},
		{"a log cut short", []string{"-rules", good, cut}, 2, "cut.log.gz"},
		{"a directory for a log", []string{"-rules", good, filepath.Dir(log)}, 2, "is a directory"},
		{"no log", []string{"-rules", good}, 2, "no log given"},
		{"no -rules", []string{log}, 2, "-rules is required"},
		{"an unknown format", []string{"-rules", good, "-format", "xml", log}, 2, "unknown format"},
		{"bad fields", []string{"-rules", good, "-fields", "when=t", log}, 2, "unknown name"},
		{"a bad plot file", []string{"-rules", good, "-plot", "x.gif", log}, 2, "want a .png or .svg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := asProcess(t, append([]string{"replay"}, tc.args...)...)
			assert.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			assert.Contains(t, stdout+stderr, tc.output)
		})
	}
}

// JSON logs are read with Envoy's field names, or the ones -fields gives.
func TestReplayJSONLogs(t *testing.T) {
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, `{"ts":"2026-10-10T09:00:%02d.%03dZ","req":{"method":"GET","path":"/api/search"},"peer":"198.51.100.9:5000"}`+"\n", i/10, i%10*100)
	}
	log := writeFile(t, "envoy.json", b.String())
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"replay", "-rules", writeFile(t, "r.yaml", "rate_limits:\n  per_ip: {requests: 10, window: 1m}\n"),
		"-fields", "time=ts,method=req.method,path=req.path,remote_addr=peer", log}, &out))
	assert.Contains(t, out.String(), "passed 10, limited (429) 40")
	assert.Contains(t, out.String(), "ip:198.51.100.9")
}

// The progress bar counts the bytes read and ends on a line of its own.
func TestReplayProgressBar(t *testing.T) {
	var w bytes.Buffer
	r, err := accesslog.NewReader(strings.NewReader(smallLog()), "x", accesslog.Options{})
	require.NoError(t, err)
	bar := replayProgress{bar: newReplayBar(&w, int64(len(smallLog())))}
	var e accesslog.Entry
	for r.Next(&e) {
	}
	bar.finish([]*accesslog.Reader{r})
	assert.Contains(t, w.String(), "replaying")
	assert.Contains(t, w.String(), "100%")
}
