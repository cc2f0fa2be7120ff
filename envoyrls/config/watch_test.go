package config

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ruleYAML(domain string, rpu int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + itoa(rpu) + "}\n"
}

func itoa(n int) string { return string(rune('0'+n/10%10)) + string(rune('0'+n%10)) }

func write(t *testing.T, path, data string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	// Write then rename, as editors and deploy tools do, so a reader never
	// sees half a file.
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	require.NoError(t, os.WriteFile(tmp, []byte(data), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

func rpu(c *Config, domain string) uint32 {
	m, ok := c.Lookup(domain, []Entry{{"k", "v"}})
	if !ok {
		return 0
	}
	return m.Rule.RequestsPerUnit
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), ruleYAML("a", 1))
	write(t, filepath.Join(dir, "sub", "b.yml"), ruleYAML("b", 2))
	write(t, filepath.Join(dir, ".hidden.yaml"), "not: [yaml")
	write(t, filepath.Join(dir, "..data", "a.yaml"), ruleYAML("a", 3)) // Kubernetes' second copy
	cfg, err := LoadDir(dir, DirOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, cfg.Domains())
	assert.Equal(t, []string{"a.yaml", filepath.Join("sub", "b.yml")}, cfg.Files())

	cfg, err = LoadDir(dir, DirOptions{Ext: []string{".yaml"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, cfg.Domains())

	_, err = LoadDir(t.TempDir(), DirOptions{})
	assert.ErrorContains(t, err, "no configuration files in the directory")
	_, err = LoadDir(filepath.Join(dir, "missing"), DirOptions{})
	assert.ErrorContains(t, err, "config: read")
}

// events records what a Watcher reports.
type events struct {
	mu      sync.Mutex
	changes int
	errs    []error
}

func (e *events) opts() WatchOptions {
	return WatchOptions{
		Debounce: 10 * time.Millisecond,
		OnChange: func(*Config) { e.mu.Lock(); e.changes++; e.mu.Unlock() },
		OnError:  func(err error) { e.mu.Lock(); e.errs = append(e.errs, err); e.mu.Unlock() },
	}
}

func (e *events) counts() (int, []error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changes, append([]error(nil), e.errs...)
}

const settle = 10 * time.Second // only a hang fails: events arrive in milliseconds

func TestWatchReloadsAndKeepsTheOldConfigOnABadFile(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), ruleYAML("a", 1))
	var ev events
	w, err := Watch(context.Background(), dir, ev.opts())
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, uint32(1), rpu(w.Current(), "a"))

	write(t, filepath.Join(dir, "a.yaml"), ruleYAML("a", 2))
	require.Eventually(t, func() bool { return rpu(w.Current(), "a") == 2 }, settle, time.Millisecond)

	// A new file that is bad: the old configuration stays, and the reason
	// names the file, line and field.
	write(t, filepath.Join(dir, "b.yaml"), "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n")
	require.Eventually(t, func() bool { _, errs := ev.counts(); return len(errs) > 0 }, settle, time.Millisecond)
	_, errs := ev.counts()
	assert.ErrorContains(t, errs[0], `config: b.yaml: line 4, column 24: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`)
	assert.Equal(t, uint32(2), rpu(w.Current(), "a"))
	assert.Equal(t, []string{"a"}, w.Current().Domains())

	// Fixed: both files load.
	write(t, filepath.Join(dir, "b.yaml"), ruleYAML("b", 3))
	require.Eventually(t, func() bool { return rpu(w.Current(), "b") == 3 }, settle, time.Millisecond)
	changes, _ := ev.counts()
	assert.Equal(t, 2, changes)

	// A file in a new subdirectory.
	write(t, filepath.Join(dir, "team", "c.yaml"), ruleYAML("c", 4))
	require.Eventually(t, func() bool { return rpu(w.Current(), "c") == 4 }, settle, time.Millisecond)

	// Removing a file reloads without it.
	require.NoError(t, os.Remove(filepath.Join(dir, "b.yaml")))
	require.Eventually(t, func() bool { return rpu(w.Current(), "b") == 0 }, settle, time.Millisecond)
}

// envoyproxy/ratelimit's deployment: RUNTIME_ROOT is a symlink, swapped to
// a new directory holding the new configuration.
func TestWatchFollowsASwappedRootSymlink(t *testing.T) {
	base := t.TempDir()
	write(t, filepath.Join(base, "v1", "ratelimit", "config", "a.yaml"), ruleYAML("a", 1))
	write(t, filepath.Join(base, "v2", "ratelimit", "config", "a.yaml"), ruleYAML("a", 2))
	root := filepath.Join(base, "current")
	require.NoError(t, os.Symlink(filepath.Join(base, "v1"), root))
	var ev events
	w, err := Watch(context.Background(), filepath.Join(root, "ratelimit", "config"), ev.opts())
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, uint32(1), rpu(w.Current(), "a"))

	tmp := filepath.Join(base, "next")
	require.NoError(t, os.Symlink(filepath.Join(base, "v2"), tmp))
	require.NoError(t, os.Rename(tmp, root))
	require.Eventually(t, func() bool { return rpu(w.Current(), "a") == 2 }, settle, time.Millisecond)

	// And the new directory is watched in turn.
	write(t, filepath.Join(base, "v2", "ratelimit", "config", "a.yaml"), ruleYAML("a", 5))
	require.Eventually(t, func() bool { return rpu(w.Current(), "a") == 5 }, settle, time.Millisecond)
}

func TestWatchRefusesABadFirstLoad(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    colour: red\n")
	_, err := Watch(context.Background(), dir, WatchOptions{})
	assert.ErrorContains(t, err, `config: a.yaml: line 4, column 5: descriptors[0].colour: unknown key "colour"`)
	_, err = Watch(context.Background(), filepath.Join(dir, "missing"), WatchOptions{})
	assert.Error(t, err)
}

func TestReloadReportsToItsCaller(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), ruleYAML("a", 1))
	ctx, cancel := context.WithCancel(context.Background())
	w, err := Watch(ctx, dir, WatchOptions{Debounce: time.Hour}) // only Reload reloads
	require.NoError(t, err)
	write(t, filepath.Join(dir, "a.yaml"), "domain: a\ndescriptors: [x]\n")
	assert.ErrorContains(t, w.Reload(), "a descriptor must be a mapping")
	assert.NoError(t, w.Reload(), "the same bad contents are reported once")
	write(t, filepath.Join(dir, "a.yaml"), ruleYAML("a", 7))
	require.NoError(t, w.Reload())
	assert.Equal(t, uint32(7), rpu(w.Current(), "a"))
	cancel()
	require.NoError(t, w.Close())
	require.NoError(t, w.Close())
}

// With StartWithoutConfig a bad directory at start is reported, Current is
// nil, and the first good version is swapped in and reported as a change;
// without it, Watch fails.
func TestWatchStartWithoutConfig(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	_, err := Watch(context.Background(), dir, WatchOptions{})
	require.ErrorContains(t, err, `invalid rate limit unit "fortnight"`)

	var mu sync.Mutex
	var errs []error
	changed := make(chan *Config, 1)
	w, err := Watch(context.Background(), dir, WatchOptions{
		StartWithoutConfig: true, Debounce: 5 * time.Millisecond,
		OnError:  func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
		OnChange: func(c *Config) { changed <- c },
	})
	require.NoError(t, err)
	defer w.Close()
	assert.Nil(t, w.Current(), "no configuration until one loads")
	mu.Lock()
	require.Len(t, errs, 1, "the first load's failure is reported before Watch returns")
	assert.ErrorContains(t, errs[0], "fortnight")
	mu.Unlock()
	assert.NoError(t, w.Reload(), "the same bad version is not reported again")

	write(t, filepath.Join(dir, "a.yaml"), ruleYAML("a", 7))
	select {
	case c := <-changed:
		assert.Equal(t, uint32(7), rpu(c, "a"))
	case <-time.After(10 * time.Second):
		t.Fatal("the first good version was not swapped in")
	}
	assert.Equal(t, uint32(7), rpu(w.Current(), "a"))

	_, err = Watch(context.Background(), filepath.Join(dir, "missing"), WatchOptions{StartWithoutConfig: true})
	assert.ErrorContains(t, err, "cannot watch the directory", "a directory that does not exist is an error all the same")
}
