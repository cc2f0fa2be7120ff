package config

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long a Watcher waits after a change for more
// changes before it reloads, when WatchOptions.Debounce is zero.
const DefaultDebounce = 100 * time.Millisecond

// WatchOptions configures a Watcher. The zero value loads as LoadDir's zero
// DirOptions, debounces by DefaultDebounce and reports nothing.
type WatchOptions struct {
	DirOptions
	// OnChange is called with each new Config a reload swapped in (not the
	// first: Current has it when Watch returns; with StartWithoutConfig and
	// a first load that failed, the first that loads).
	OnChange func(*Config)
	// OnError is called with the reason a reload kept the current Config:
	// a bad file (its *Errors name file, line and field) or a directory
	// that could not be read.
	OnError func(error)
	// Debounce is how long the watcher waits after a change for more
	// changes before it reloads: editors and Kubernetes replace files in
	// several steps. Zero means DefaultDebounce.
	Debounce time.Duration
	// StartWithoutConfig lets Watch return a Watcher when the first load
	// fails (a bad file, no file): its Current is nil until a load
	// succeeds, the failure goes to OnError before Watch returns, and the
	// first Config that loads goes to OnChange. envoyproxy/ratelimit
	// starts so. A directory that cannot be watched (one that does not
	// exist) is an error all the same. By default the first load must
	// succeed.
	StartWithoutConfig bool
}

// Watcher keeps the Config of a directory current: it loads the directory,
// watches it, and on each change loads and checks the whole directory
// first, then swaps the new Config in atomically if it is valid, or keeps
// the current one and reports why through OnError. Readers call Current per
// request; a request never sees a half-loaded Config.
//
// It watches the directory, each of its subdirectories, and the directory
// holding each symlink on the directory's path, so that it sees files
// edited in place, files replaced by rename, Kubernetes' ConfigMap
// updates (a "..data" symlink swapped) and envoyproxy/ratelimit's way of
// deploying a new configuration (RUNTIME_ROOT, a symlink, swapped to a new
// directory). A burst of events is debounced into one reload, and a reload
// that finds the same contents changes nothing.
//
// A Watcher is safe for concurrent use. Its callbacks run one at a time,
// on the watcher's goroutine or Reload's caller; they must not call Close
// or Reload. Close stops it; so does cancelling the context given to Watch.
type Watcher struct {
	dir  string
	opts WatchOptions
	cur  atomic.Pointer[Config]

	fsw    *fsnotify.Watcher
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // serialises reloads; guards the fields below
	sum     [sha256.Size]byte
	watched map[string]bool
}

// Watch loads the configuration directory dir and watches it until ctx is
// cancelled or Close is called. It returns an error, and no Watcher, if the
// first load fails, unless opts.StartWithoutConfig.
func Watch(ctx context.Context, dir string, opts WatchOptions) (*Watcher, error) {
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("config: watch %s: %w", dir, err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("config: watch %s: %w", dir, err)
	}
	w := &Watcher{dir: abs, opts: opts, fsw: fsw, done: make(chan struct{}), watched: map[string]bool{}}
	// Watch before the first read, so no change falls between the two.
	w.follow()
	if !w.watched[abs] {
		_ = fsw.Close()
		return nil, fmt.Errorf("config: watch %s: cannot watch the directory (does it exist?)", dir)
	}
	files, err := readDir(abs, opts.Ext)
	if err == nil && len(files) == 0 {
		err = &Error{File: dir, Msg: "no configuration files in the directory"}
	}
	var cfg *Config
	if err == nil {
		cfg, err = Load(files, opts.Options)
	}
	w.sum = fingerprint(files) // a bad first version is reported once, as on a reload
	switch {
	case err != nil && !opts.StartWithoutConfig:
		_ = fsw.Close()
		return nil, err
	case err != nil:
		w.report(err)
	default:
		w.cur.Store(cfg)
	}
	ctx, w.cancel = context.WithCancel(ctx)
	go w.run(ctx)
	return w, nil
}

// Current returns the Config in force: never nil, except with
// StartWithoutConfig before the first Config loads.
func (w *Watcher) Current() *Config { return w.cur.Load() }

// Dir returns the directory watched, as an absolute path.
func (w *Watcher) Dir() string { return w.dir }

// Reload reloads the directory now (as on SIGHUP) and swaps in its Config
// if its contents changed and are valid. It returns the reason it kept the
// current Config, instead of passing it to OnError.
func (w *Watcher) Reload() error { return w.reload(false) }

// Close stops watching and waits for the watcher's goroutine to end. The
// current Config stays readable. Close is idempotent.
func (w *Watcher) Close() error {
	w.cancel()
	<-w.done
	return nil
}

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	defer func() { _ = w.fsw.Close() }()
	timer := time.NewTimer(w.opts.Debounce)
	timer.Stop()
	defer timer.Stop()
	maxWait := 10 * w.opts.Debounce // a steady stream of events postpones a reload at most this long
	var first time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			if now.Sub(first) < maxWait {
				timer.Reset(w.opts.Debounce)
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.mu.Lock()
			w.report(fmt.Errorf("config: watch %s: %w", w.dir, err))
			w.mu.Unlock()
		case <-timer.C:
			first = time.Time{}
			_ = w.reload(true)
		}
	}
}

func (w *Watcher) reload(report bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.follow()
	err := w.load()
	if err != nil && report {
		w.report(err)
	}
	return err
}

// load is reload's work, under w.mu.
func (w *Watcher) load() error {
	files, err := readDir(w.dir, w.opts.Ext)
	if err != nil {
		return fmt.Errorf("%w (keeping the current configuration)", err)
	}
	sum := fingerprint(files)
	if sum == w.sum {
		return nil
	}
	if len(files) == 0 {
		w.sum = sum
		return &Error{File: w.dir, Msg: "no configuration files in the directory (keeping the current configuration)"}
	}
	cfg, err := Load(files, w.opts.Options)
	w.sum = sum // a bad version is reported once, not at every event
	if err != nil {
		return err
	}
	w.cur.Store(cfg)
	if w.opts.OnChange != nil {
		w.opts.OnChange(cfg)
	}
	return nil
}

func (w *Watcher) report(err error) {
	if w.opts.OnError != nil {
		w.opts.OnError(err)
	}
}

// follow brings the set of watched directories up to date: the
// directory, its subdirectories, and the parent of every symlink on its
// path. Under w.mu, or before the watcher runs.
func (w *Watcher) follow() {
	want := map[string]bool{}
	for _, p := range symlinkParents(w.dir) {
		want[p] = true
	}
	_ = filepath.WalkDir(w.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if path != w.dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			want[path] = true
		}
		return nil
	})
	for p := range w.watched {
		_ = w.fsw.Remove(p) // re-added below when still wanted: a path may now lead elsewhere
	}
	w.watched = map[string]bool{}
	for p := range want {
		if w.fsw.Add(p) == nil {
			w.watched[p] = true
		}
	}
}

// symlinkParents returns the directories holding a symlink on path's way
// from the root, where swapping the symlink shows as an event.
func symlinkParents(path string) []string {
	var out []string
	cur := string(filepath.Separator)
	for _, part := range strings.Split(filepath.Clean(path), string(filepath.Separator)) {
		if part == "" {
			continue
		}
		next := filepath.Join(cur, part)
		if fi, err := os.Lstat(next); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			out = append(out, cur)
			if target, err := filepath.EvalSymlinks(next); err == nil {
				next = target
			}
		}
		cur = next
	}
	return out
}

// fingerprint sums the names and contents of files.
func fingerprint(files []File) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s:%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
