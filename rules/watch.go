package rules

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchOptions configures a Watcher. The zero value watches with the default
// debounce, reads no environment and reports nothing.
type WatchOptions struct {
	// OnChange is called with the new Rules after each reload that replaced
	// them (not for the first load: Current has those when Watch returns).
	OnChange func(*Rules)
	// OnError is called with the reason a reload the watcher started failed;
	// the current Rules stay in force. The error of a bad file holds its
	// ConfigErrors, each naming a line.
	OnError func(error)
	// Env, if not nil, is overlaid on every load of the file (ApplyEnv), so
	// that environment overrides survive reloads. Typically os.LookupEnv.
	Env func(string) (string, bool)
	// Debounce is how long the watcher waits after a change for more
	// changes before it reloads: editors and Kubernetes replace a file in
	// several steps. Zero means DefaultDebounce.
	Debounce time.Duration
	// MaxFileSize is the largest file read, in bytes, on the first load and
	// every reload: a larger one is refused with a *FileSizeError before it
	// is parsed (on a reload, the current Rules stay). Zero means
	// DefaultMaxFileSize; negative means no bound.
	MaxFileSize int64
}

// DefaultDebounce is the debounce of WatchOptions' zero value.
const DefaultDebounce = 100 * time.Millisecond

// Watcher keeps the Rules of a configuration file current: it loads the
// file, watches it, and on each change parses and compiles it first, then
// swaps it in atomically if it is valid, or keeps the current Rules and
// reports why through OnError if not. Readers call Current per request.
//
// It watches the file's directory, not the file, so that it sees a file
// replaced by rename (as editors save) and Kubernetes' ConfigMap symlink
// swaps (events on the file's name and on names starting with ".."); if the
// file is a symlink into another directory, it watches that one too. A burst
// of events is debounced into one reread, and only changed contents are
// reloaded.
//
// A Watcher is safe for concurrent use. Its callbacks are called one at a
// time: OnError on the watcher's goroutine, OnChange on the goroutine that
// reloaded (the watcher's, or Reload's caller). They must not call Close or
// Reload. Close stops the watcher; so does cancelling the context given to
// Watch.
type Watcher struct {
	path string
	opts WatchOptions
	cur  atomic.Pointer[Rules]

	fsw    *fsnotify.Watcher
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex // serialises reloads; guards the fields below
	last   []byte     // the contents last loaded or rejected
	target string     // the file's path with symlinks resolved
	extra  string     // the target's directory, when watched besides path's
}

// Watch loads the file at path (overlaid with opts.Env) and watches it until
// ctx is cancelled or Close is called. It returns an error, and no Watcher,
// if the first load fails.
func Watch(ctx context.Context, path string, opts WatchOptions) (*Watcher, error) {
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("rules: watch %s: %w", path, err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("rules: watch %s: %w", path, err)
	}
	// Watch before the first read, so no change falls between the two.
	if err := fsw.Add(filepath.Dir(abs)); err != nil {
		_ = fsw.Close()
		return nil, fmt.Errorf("rules: watch %s: %w", path, err)
	}
	w := &Watcher{path: abs, opts: opts, fsw: fsw, done: make(chan struct{})}
	data, err := readFile(abs, opts.MaxFileSize)
	if err != nil {
		_ = fsw.Close()
		return nil, err
	}
	r, err := compileData(data, abs, opts.Env)
	if err != nil {
		_ = fsw.Close()
		return nil, err
	}
	w.cur.Store(r)
	w.last = data
	w.follow()
	ctx, w.cancel = context.WithCancel(ctx)
	go w.run(ctx)
	return w, nil
}

// Current returns the Rules in force: never nil, and never a Rules being
// built. Load it once per request and plan with it.
func (w *Watcher) Current() *Rules { return w.cur.Load() }

// Static returns a rules source that always returns r, for rules that never
// change: the Config.Rules of the middleware and of the gRPC interceptors
// takes either Static(r) or a Watcher's Current method. The source is safe
// for concurrent use, as r is.
func Static(r *Rules) func() *Rules {
	return func() *Rules { return r }
}

// Reload rereads the file now (as on SIGHUP) and swaps in its Rules if its
// contents changed and are valid. It returns the reason it kept the current
// Rules instead of passing it to OnError.
func (w *Watcher) Reload() error { return w.reload(false) }

// Close stops watching and waits for the watcher's goroutine to end. The
// current Rules stay readable. Close is idempotent.
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
	// A steady stream of events postpones the reread by at most maxWait.
	maxWait := 10 * w.opts.Debounce
	var first time.Time // of the pending burst; zero if none
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if !w.relevant(ev.Name) {
				continue
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
			w.report(fmt.Errorf("rules: watch %s: %w", w.path, err))
			w.mu.Unlock()
		case <-timer.C:
			first = time.Time{}
			_ = w.reload(true)
		}
	}
}

// reload rereads the file and swaps in its Rules if its contents changed and
// compile. It returns why it kept the current Rules, and also passes that to
// OnError if report is set.
func (w *Watcher) reload(report bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.load()
	if err != nil && report {
		w.report(err)
	}
	return err
}

// relevant reports whether an event on name may change the file: one on
// its name, its resolved target's name, or a Kubernetes "..data" style name.
func (w *Watcher) relevant(name string) bool {
	base := filepath.Base(name)
	if base == filepath.Base(w.path) || strings.HasPrefix(base, "..") {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return name == w.target
}

// follow watches the directory of the file's symlink target too, when it is
// not the file's own, so that edits to the target are seen. Under w.mu,
// or before the watcher runs.
func (w *Watcher) follow() {
	target, err := filepath.EvalSymlinks(w.path)
	if err != nil {
		return
	}
	w.target = target
	dir := filepath.Dir(target)
	if dir == filepath.Dir(w.path) || dir == w.extra {
		return
	}
	if w.extra != "" {
		_ = w.fsw.Remove(w.extra) // may be gone already, as Kubernetes' old data directories are
		w.extra = ""
	}
	if w.fsw.Add(dir) == nil {
		w.extra = dir
	}
}

// load is reload's work, under w.mu.
func (w *Watcher) load() error {
	w.follow()
	data, err := readFile(w.path, w.opts.MaxFileSize)
	if err != nil {
		return fmt.Errorf("%w (keeping the current rules)", err)
	}
	if bytes.Equal(data, w.last) {
		return nil
	}
	w.last = data
	r, err := compileData(data, w.path, w.opts.Env)
	if err != nil {
		return err
	}
	w.cur.Store(r)
	if w.opts.OnChange != nil {
		w.opts.OnChange(r)
	}
	return nil
}

func (w *Watcher) report(err error) {
	if w.opts.OnError != nil {
		w.opts.OnError(err)
	}
}
