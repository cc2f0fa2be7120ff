package rules

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitFor bounds how long a test waits for the file system to report.
const waitFor = 10 * time.Second

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// replaceFile writes content beside path and renames it over path, as
// editors and atomic writers do.
func replaceFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func globalRule(n int) string {
	return "rate_limits:\n  global: {requests: " + itoa(n) + ", window: 1}\n  default: {requests: " + itoa(n) + ", window: 1}\n"
}

func itoa(n int) string { return strconv.Itoa(n) }

// globalRate is the global limit's rate in r, the version globalRule wrote.
func globalRate(t testing.TB, r *Rules) int64 {
	t.Helper()
	_, checks := r.Plan(Request{}, nil)
	require.NotEmpty(t, checks)
	return checks[0].Limit.Rate
}

// recorder collects a Watcher's callbacks.
type recorder struct {
	changes chan *Rules
	errs    chan error
}

func newRecorder() *recorder {
	return &recorder{changes: make(chan *Rules, 100), errs: make(chan error, 100)}
}

func (r *recorder) options() WatchOptions {
	return WatchOptions{
		OnChange: func(x *Rules) { r.changes <- x },
		OnError:  func(err error) { r.errs <- err },
		Debounce: 10 * time.Millisecond,
	}
}

// torn reports whether err is a reload that read a file in the middle of
// its rewrite in place: os.WriteFile truncates it, then writes it, and a
// watcher whose debounce ends between the two (a loaded machine holds the
// writer up) reads it empty. The watcher rightly reports that and keeps
// the rules; the write that follows brings the reload the test waits for.
// No test here writes an empty file on purpose.
func torn(err error) bool { return strings.Contains(err.Error(), "empty configuration") }

func (r *recorder) change(t *testing.T) *Rules {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case x := <-r.changes:
			return x
		case err := <-r.errs:
			if torn(err) {
				continue
			}
			t.Fatalf("want a change, got error %v", err)
		case <-deadline:
			t.Fatal("no change reported")
		}
		return nil
	}
}

func (r *recorder) err(t *testing.T) error {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case x := <-r.changes:
			t.Fatalf("want an error, got a change to %p", x)
		case err := <-r.errs:
			if torn(err) {
				continue
			}
			return err
		case <-deadline:
			t.Fatal("no error reported")
		}
		return nil
	}
}

func TestWatchChanges(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "rules.yaml", globalRule(1))
	rec := newRecorder()
	w, err := Watch(context.Background(), path, rec.options())
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, int64(1), globalRate(t, w.Current()))

	// Written in place.
	writeFile(t, dir, "rules.yaml", globalRule(2))
	got := rec.change(t)
	assert.Equal(t, int64(2), globalRate(t, got))
	assert.Same(t, got, w.Current())

	// Invalid: the current rules stay, and the error names the line.
	writeFile(t, dir, "rules.yaml", "rate_limits:\n  global: {requests: 3, window: 1}\n  default: {requests: -3, window: 1}\n")
	err = rec.err(t)
	assert.Contains(t, err.Error(), path+": line 3, column 23: rate_limits.default.requests: must be positive, got -3")
	assert.Equal(t, int64(2), globalRate(t, w.Current()))

	// Replaced by rename, as editors save.
	replaceFile(t, path, globalRule(4))
	assert.Equal(t, int64(4), globalRate(t, rec.change(t)))

	// Removed: reported, and the rules stay; recreated: loaded.
	require.NoError(t, os.Remove(path))
	err = rec.err(t)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Equal(t, int64(4), globalRate(t, w.Current()))
	writeFile(t, dir, "rules.yaml", globalRule(5))
	assert.Equal(t, int64(5), globalRate(t, rec.change(t)))

	// Another file in the directory changing reloads nothing.
	writeFile(t, dir, "other.txt", "x")
	select {
	case x := <-rec.changes:
		t.Fatalf("unexpected change to %d", globalRate(t, x))
	case err := <-rec.errs:
		t.Fatalf("unexpected error %v", err)
	case <-time.After(100 * time.Millisecond):
	}

	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "Close is idempotent")
	assert.Equal(t, int64(5), globalRate(t, w.Current()), "the rules stay readable after Close")
}

func TestWatchKubernetesSymlinkSwap(t *testing.T) {
	// A ConfigMap volume: rules.yaml -> ..data/rules.yaml, ..data -> ..v1;
	// an update writes ..v2 and renames a new ..data symlink over the old.
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "..v1"), 0o700))
	writeFile(t, filepath.Join(dir, "..v1"), "rules.yaml", globalRule(1))
	require.NoError(t, os.Symlink("..v1", filepath.Join(dir, "..data")))
	require.NoError(t, os.Symlink(filepath.Join("..data", "rules.yaml"), filepath.Join(dir, "rules.yaml")))

	rec := newRecorder()
	w, err := Watch(context.Background(), filepath.Join(dir, "rules.yaml"), rec.options())
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, int64(1), globalRate(t, w.Current()))

	require.NoError(t, os.Mkdir(filepath.Join(dir, "..v2"), 0o700))
	writeFile(t, filepath.Join(dir, "..v2"), "rules.yaml", globalRule(2))
	require.NoError(t, os.Symlink("..v2", filepath.Join(dir, "..data_tmp")))
	require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "..v1")))

	assert.Equal(t, int64(2), globalRate(t, rec.change(t)))
}

func TestWatchSymlinkIntoAnotherDirectory(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	target := writeFile(t, elsewhere, "real.yaml", globalRule(1))
	path := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.Symlink(target, path))

	rec := newRecorder()
	w, err := Watch(context.Background(), path, rec.options())
	require.NoError(t, err)
	defer w.Close()

	writeFile(t, elsewhere, "real.yaml", globalRule(2)) // the target, edited in place
	assert.Equal(t, int64(2), globalRate(t, rec.change(t)))
}

func TestWatchDebouncesBursts(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "rules.yaml", globalRule(1))
	rec := newRecorder()
	opts := rec.options()
	opts.Debounce = 200 * time.Millisecond
	w, err := Watch(context.Background(), path, opts)
	require.NoError(t, err)
	defer w.Close()

	const writes = 20
	for v := 2; v <= writes+1; v++ {
		writeFile(t, dir, "rules.yaml", globalRule(v))
	}
	changes := 0
	for {
		changes++
		if globalRate(t, rec.change(t)) == writes+1 {
			break
		}
	}
	assert.Less(t, changes, writes/2, "a burst of writes is coalesced")
}

func TestWatchFirstLoadFails(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "rules.yaml", "rate_limits:\n  global: {requests: 0, window: 1}\n")
	w, err := Watch(context.Background(), path, WatchOptions{})
	assert.Nil(t, w)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 2")

	_, err = Watch(context.Background(), filepath.Join(dir, "missing.yaml"), WatchOptions{})
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestWatchEnvOverlay(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "rules.yaml", globalRule(1))
	opts := WatchOptions{Env: env{EnvDefault: "77"}.lookup}
	w, err := Watch(context.Background(), path, opts)
	require.NoError(t, err)
	defer w.Close()
	check := func() {
		_, checks := w.Current().Plan(Request{}, nil)
		require.Len(t, checks, 2)
		assert.Equal(t, int64(77), checks[1].Limit.Rate, "the environment wins on every load")
	}
	check()
	writeFile(t, dir, "rules.yaml", globalRule(2))
	require.NoError(t, w.Reload())
	assert.Equal(t, int64(2), globalRate(t, w.Current()))
	check()
}

func TestWatchReload(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "rules.yaml", globalRule(1))
	var changes atomic.Int32
	w, err := Watch(context.Background(), path, WatchOptions{
		OnChange: func(*Rules) { changes.Add(1) },
		Debounce: time.Hour, // only Reload reloads in this test
	})
	require.NoError(t, err)
	defer w.Close()

	before := w.Current()
	require.NoError(t, w.Reload())
	assert.Same(t, before, w.Current(), "unchanged contents are not reloaded")

	writeFile(t, dir, "rules.yaml", "rate_limits: [")
	err = w.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "invalid YAML")
	assert.Same(t, before, w.Current())

	writeFile(t, dir, "rules.yaml", globalRule(2))
	require.NoError(t, w.Reload())
	assert.Equal(t, int64(2), globalRate(t, w.Current()))
	assert.Equal(t, int32(1), changes.Load())
}

func TestWatchStopsWithContext(t *testing.T) {
	path := writeFile(t, t.TempDir(), "rules.yaml", globalRule(1))
	ctx, cancel := context.WithCancel(context.Background())
	w, err := Watch(ctx, path, WatchOptions{})
	require.NoError(t, err)
	cancel()
	select {
	case <-w.done:
	case <-time.After(waitFor):
		t.Fatal("the watcher did not stop with its context")
	}
	require.NoError(t, w.Close())
}

func TestWatchConcurrentPlanDuringReloads(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "rules.yaml", globalRule(1))
	w, err := Watch(context.Background(), path, WatchOptions{Debounce: time.Millisecond, OnError: func(error) {}})
	require.NoError(t, err)
	defer w.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var plans atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]Check, 0, 8)
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := w.Current()
				if r == nil {
					t.Error("Current returned nil")
					return
				}
				_, checks := r.Plan(Request{Client: "c"}, dst[:0])
				// Both rules of one version carry its number: a half-built
				// Rules would mix them.
				if len(checks) != 2 || checks[0].Limit.Rate != checks[1].Limit.Rate {
					t.Errorf("inconsistent rules: %+v", checks)
					return
				}
				plans.Add(1)
			}
		}()
	}
	last := int64(1)
	for v := 2; v <= 60; v++ {
		content := globalRule(v)
		if v%3 == 0 {
			content = "rate_limits: {global: {requests: 0" // invalid: kept out
		} else {
			last = int64(v)
		}
		if v%2 == 0 {
			replaceFile(t, path, content)
		} else {
			writeFile(t, dir, "rules.yaml", content)
		}
		_ = w.Reload() // also races the watcher's own reloads
	}
	replaceFile(t, path, globalRule(int(last)+1000))
	require.Eventually(t, func() bool { return globalRate(t, w.Current()) == last+1000 }, waitFor, time.Millisecond)
	close(stop)
	wg.Wait()
	assert.Positive(t, plans.Load())
}
