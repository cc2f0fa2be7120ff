package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/trafficlog"
)

// updateDocs rewrites the example log and the outputs docs/rules.md shows:
//
//	go test -run 'TestDocs' ./cmd/hybridlimit -update
var updateDocs = flag.Bool("update", false, "rewrite docs/examples/access.log.gz and the command outputs of docs/rules.md")

// exampleScenario is the traffic of docs/examples/access.log.gz: ten
// minutes of six well-behaved clients (two of them an office behind a
// forward proxy), an abuser flooding the search from 09:04 to 09:07, and a
// crawler walking the items behind the office's proxy.
func exampleScenario() trafficlog.Scenario {
	return trafficlog.Scenario{Start: time.Date(2026, 10, 10, 9, 0, 0, 0, time.UTC), Duration: 10 * time.Minute, Seed: 27,
		Clients: 6, ClientRate: 0.4, Office: 2, AbuseFrom: 4 * time.Minute, AbuseFor: 3 * time.Minute, AbuseRate: 6, CrawlRate: 2.5}
}

const exampleLog = "../../docs/examples/access.log.gz"

// The example log in the repository is the one the scenario writes.
func TestDocsExampleLog(t *testing.T) {
	var want bytes.Buffer
	_, err := trafficlog.Write(&want, exampleScenario())
	require.NoError(t, err)
	if *updateDocs {
		var z bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		_, _ = zw.Write(want.Bytes())
		require.NoError(t, zw.Close())
		require.NoError(t, os.WriteFile(exampleLog, z.Bytes(), 0o644))
	}
	f, err := os.Open(exampleLog)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	got, err := io.ReadAll(zr)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want.Bytes(), got), "docs/examples/access.log.gz is not what the scenario writes: go test -run TestDocs ./cmd/hybridlimit -update")
}

// consoleBlock is a ```console block of a doc: "$ hybridlimit ..." (its
// lines joined by a trailing \), then the command's output.
var consoleBlock = regexp.MustCompile("(?s)```console\n\\$ (hybridlimit (?:[^\n]*\\\\\n)*[^\n]*)\n(.*?)```")

// Every hybridlimit command docs/rules.md shows prints what it shows, run
// from the repository's root as a reader would.
func TestDocsCommandsPrintWhatTheDocsShow(t *testing.T) {
	raw, err := os.ReadFile("../../docs/rules.md")
	require.NoError(t, err)
	t.Chdir("../..")
	blocks := consoleBlock.FindAllSubmatchIndex(raw, -1)
	require.GreaterOrEqual(t, len(blocks), 2, "docs/rules.md shows explain and replay")
	var updated bytes.Buffer
	last := 0
	for _, m := range blocks {
		line := strings.ReplaceAll(string(raw[m[2]:m[3]]), "\\\n", " ")
		words, err := shellWords(line)
		require.NoError(t, err, line)
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), words[1:], &out), line)
		want := string(raw[m[4]:m[5]])
		if *updateDocs {
			updated.Write(raw[last:m[4]])
			updated.Write(out.Bytes())
			last = m[5]
			continue
		}
		assert.Equal(t, want, out.String(), "docs/rules.md: the output of %s (go test -run TestDocs ./cmd/hybridlimit -update)", line)
	}
	if *updateDocs {
		updated.Write(raw[last:])
		require.NoError(t, os.WriteFile("docs/rules.md", updated.Bytes(), 0o644))
	}
}
