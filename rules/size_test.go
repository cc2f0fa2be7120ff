package rules

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// endpointsFile is a valid rules file of at least size bytes: a default
// rule and as many endpoint rules as fit.
func endpointsFile(size int) string {
	var b strings.Builder
	b.WriteString("rate_limits:\n  default: {requests: 100, window: 60}\n  endpoints:\n")
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "    /api/v1/resource%d: {requests: %d, window: 60}\n", i, 10+i%1000)
	}
	return b.String()
}

// sized is a valid rules file of exactly size bytes: a few rules padded
// with a comment, which costs little to parse (the race detector makes
// parsing a megabyte of rules take seconds).
func sized(t *testing.T, size int) string {
	t.Helper()
	doc := endpointsFile(200)
	pad := size - len(doc) - 2
	require.Positive(t, pad)
	doc += "#" + strings.Repeat("x", pad) + "\n"
	require.Len(t, doc, size)
	return doc
}

// A file over the bound is refused before it is parsed, by every way in,
// with an error naming its size and the bound; at the bound it loads.
func TestFileSizeBound(t *testing.T) {
	dir := t.TempDir()
	at := writeFile(t, dir, "at.yaml", sized(t, DefaultMaxFileSize))
	over := writeFile(t, dir, "over.yaml", sized(t, DefaultMaxFileSize+1))
	small := writeFile(t, dir, "small.yaml", sized(t, 4096))

	loads := []struct {
		name string
		load func(path string, max int64) error
	}{
		{"LoadWith", func(path string, max int64) error {
			_, err := LoadWith(path, LoadOptions{MaxFileSize: max})
			return err
		}},
		{"Watch", func(path string, max int64) error {
			w, err := Watch(context.Background(), path, WatchOptions{MaxFileSize: max})
			if err == nil {
				require.NoError(t, w.Close())
			}
			return err
		}},
	}
	for _, tc := range []struct {
		name string
		path string
		max  int64 // 0: the default
		size int64 // the size the error names; 0: no error
	}{
		{"at the default bound", at, 0, 0},
		{"a byte over the default bound", over, 0, DefaultMaxFileSize + 1},
		{"under a bound set lower", small, 4096, 0},
		{"over a bound set lower", at, 4096, DefaultMaxFileSize},
		{"under a bound set higher", over, DefaultMaxFileSize + 1, 0},
		{"no bound", over, -1, 0},
	} {
		for _, l := range loads {
			t.Run(tc.name+"/"+l.name, func(t *testing.T) {
				err := l.load(tc.path, tc.max)
				if tc.size == 0 {
					require.NoError(t, err)
					return
				}
				max := tc.max
				if max == 0 {
					max = DefaultMaxFileSize
				}
				fe, ok := errors.AsType[*FileSizeError](err)
				require.True(t, ok, "want a *FileSizeError, got %v", err)
				assert.Equal(t, FileSizeError{File: tc.path, Size: tc.size, Max: max}, *fe)
				assert.Contains(t, err.Error(), tc.path)
				assert.Contains(t, err.Error(), fmt.Sprintf("(%d bytes)", tc.size), "the file's size")
				assert.Contains(t, err.Error(), fmt.Sprintf("bound of %s (%d bytes)", byteCount(max), max), "the bound")
			})
		}
	}

	// Load and ParseFile hold the default bound.
	_, err := Load(over, nil)
	assert.ErrorContains(t, err, "over the size bound of 1 MiB (1048576 bytes) on a rules file: it is 1.0 MiB (1048577 bytes)")
	_, err = ParseFile(over)
	_, ok := errors.AsType[*FileSizeError](err)
	assert.True(t, ok, "ParseFile: %v", err)
	_, err = ParseFile(at)
	assert.NoError(t, err)
}

// A file that has no size to tell (a device, a pipe) is read up to the
// bound and no further: /dev/zero, which the loader once read until memory
// ran out.
func TestFileSizeBoundWithoutASize(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero here:", err)
	}
	_, err := LoadWith("/dev/zero", LoadOptions{MaxFileSize: 64 << 10})
	fe, ok := errors.AsType[*FileSizeError](err)
	require.True(t, ok, "want a *FileSizeError, got %v", err)
	assert.Equal(t, FileSizeError{File: "/dev/zero", Size: -1, Max: 64 << 10}, *fe)
	assert.ErrorContains(t, err, "/dev/zero: the file is over the size bound of 64 KiB (65536 bytes) on a rules file: it is larger than that")
}

// A reload of a file grown over the bound keeps the current rules and
// says why.
func TestWatchKeepsTheRulesWhenTheFileGrowsOverTheBound(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "rules.yaml", globalRule(5))
	rec := newRecorder()
	opts := rec.options()
	opts.MaxFileSize = 4096
	w, err := Watch(context.Background(), path, opts)
	require.NoError(t, err)
	defer w.Close()

	replaceFile(t, path, sized(t, 4097))
	err = rec.err(t)
	_, ok := errors.AsType[*FileSizeError](err)
	assert.True(t, ok, "want a *FileSizeError, got %v", err)
	assert.ErrorContains(t, err, "(keeping the current rules)")
	assert.Equal(t, int64(5), globalRate(t, w.Current()))
	assert.ErrorContains(t, w.Reload(), "over the size bound of 4 KiB")

	replaceFile(t, path, globalRule(6))
	assert.Equal(t, int64(6), globalRate(t, rec.change(t)), "back under the bound, it loads")
}

// allocated returns the bytes f allocated on the heap.
func allocated(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// parseCost is the most a rules file may cost to parse, per byte of it,
// whatever its aliases: about 110 bytes a byte were measured for the worst
// file found (a rule aliased from thousands of tiers), 50 for plain rules.
const parseCost = 256

// Aliases cost what the file holds, never what they expand to: a "billion
// laughs" file (each level nine aliases of the one before) expands to 10^9
// strings if anything follows every alias; the parser keeps aliases as
// pointers and the rules are read to a fixed depth, so parsing it costs in
// proportion to the file.
func TestAliasesCostWhatTheFileHolds(t *testing.T) {
	laughs := func(where string) string {
		var b strings.Builder
		b.WriteString("rate_limits:\n  " + where + ":\n  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
		for i := 1; i < 10; i++ {
			fmt.Fprintf(&b, "  - &a%d [", i)
			for j := range 9 {
				if j > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "*a%d", i-1)
			}
			b.WriteString("]\n")
		}
		return b.String()
	}
	manyRefs := func() string { // every tier the same aliased rule
		var b strings.Builder
		b.WriteString("rate_limits:\n  tiers:\n    t0: &r {requests: 1, window: 1}\n")
		for i := 1; b.Len() < 64<<10; i++ {
			fmt.Fprintf(&b, "    t%d: *r\n", i)
		}
		return b.String()
	}
	twice := func() string { // one large mapping walked as endpoints and as tiers
		var b strings.Builder
		b.WriteString("rate_limits:\n  endpoints: &e\n")
		for i := 0; b.Len() < 64<<10; i++ {
			fmt.Fprintf(&b, "    /a%d: {requests: 1, window: 1}\n", i)
		}
		b.WriteString("  tiers: *e\n")
		return b.String()
	}
	for _, tc := range []struct {
		name, doc string
		valid     bool
	}{
		{"billion laughs in ban", laughs("ban"), false},
		{"billion laughs in endpoints", laughs("endpoints"), false},
		{"a rule aliased from every tier", manyRefs(), true},
		{"a mapping aliased twice", twice(), true},
		{"nesting deeper than the parser allows", "rate_limits:\n  ban: " + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			cost := allocated(func() { _, err = Parse([]byte(tc.doc)) })
			if tc.valid {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
			assert.LessOrEqual(t, cost, uint64(parseCost*len(tc.doc)), "%d bytes for a file of %d", cost, len(tc.doc))
		})
	}
}

// A value from the environment is quoted in its error, but not at any
// length: an environment variable may hold 128 KiB.
func TestLongEnvironmentValuesAreCutInErrors(t *testing.T) {
	long := strings.Repeat("9", 100_000) + "x"
	_, err := FromEnv(func(name string) (string, bool) {
		if name == EnvDefault {
			return long, true
		}
		return "", false
	})
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 300, "the message: %.300s", err)
	assert.Contains(t, err.Error(), EnvDefault+`="9999`)
	assert.Contains(t, err.Error(), "(100001 bytes)")
	ce, ok := errors.AsType[*ConfigError](err)
	require.True(t, ok)
	assert.Equal(t, long, ce.Value, "the error keeps the whole value")
}

// The cost of a file at the bound, and of one ten times larger read with
// no bound, as the docs give them.
func BenchmarkLoadAtTheSizeBound(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int
		max  int64
	}{{"1MiB", DefaultMaxFileSize, 0}, {"10MiB_unbounded", 10 * DefaultMaxFileSize, -1}} {
		b.Run(bc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "rules.yaml")
			require.NoError(b, os.WriteFile(path, []byte(endpointsFile(bc.size-100)), 0o600))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := LoadWith(path, LoadOptions{MaxFileSize: bc.max}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
