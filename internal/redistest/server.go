package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	// readyTimeout bounds how long one redis-server launch may take to answer.
	// A healthy start takes a few milliseconds; the bound only catches hangs.
	readyTimeout = 10 * time.Second
	// startAttempts is how many fresh ports Start tries when another process
	// grabs the chosen port between probing and binding.
	startAttempts = 5
	// rebindTimeout is how long Restart keeps retrying its fixed port.
	rebindTimeout = 5 * time.Second
	// opTimeout is the dial/read/write timeout of the package's own
	// short-lived go-redis connections (Do, Flush, cluster health probes).
	opTimeout = 2 * time.Second
	// busOffset is the fixed distance between a cluster node's client port and
	// its cluster bus port (Redis' default for cluster-port 0).
	busOffset = 10000

	logFile      = "redis.log"
	outFile      = "redis.out"
	nodesFile    = "nodes.conf"
	sentinelFile = "sentinel.conf"
	tailLines    = 30
	tailMaxRead  = 16 << 10
)

// launchError classifies why a launch failed when the port was taken. It is
// a constant type so the package keeps no package-level variables.
type launchError int

const (
	// errBindFailed marks a launch whose redis-server exited because its port
	// was taken: retryable.
	errBindFailed launchError = iota + 1
	// errForeign marks a launch where a process other than ours answered on
	// the port: the port is taken by somebody else.
	errForeign
)

func (e launchError) Error() string {
	switch e {
	case errBindFailed:
		return "port already in use"
	case errForeign:
		return "port is answered by a redis-server this package did not start"
	default:
		return "launch failed"
	}
}

type options struct {
	args []string
}

// Option configures Start and StartCluster.
type Option func(*options)

// WithArgs appends extra redis-server command-line arguments, e.g.
// WithArgs("--maxmemory", "1mb"), so a test can shape the server it needs.
// They come after the package's own arguments and therefore override them,
// except that bind, port, dir, logfile and daemonize must not be changed (the
// package relies on them); with StartCluster they apply to every node.
func WithArgs(args ...string) Option {
	args = append([]string(nil), args...)
	return func(o *options) { o.args = append(o.args, args...) }
}

// Server is a redis-server process owned by one test. It lives in its own
// temporary directory on a fixed loopback port and is killed and reaped when
// the test ends. It is safe for concurrent use.
type Server struct {
	tb      testing.TB
	bin     string
	dir     string
	cluster bool
	// sentinelConf, for a Sentinel, is the configuration its file starts
	// with; the file then holds Sentinel's state and is kept across Restart.
	sentinelConf string
	extra        []string
	port         int    // fixed once Start returns
	addr         string // fixed once Start returns

	mu      sync.Mutex
	proc    *process // latest process, possibly exited; nil before the first launch
	lastPID int
}

// process is one redis-server incarnation of a Server.
type process struct {
	cmd    *exec.Cmd
	pid    int
	done   chan struct{} // closed once cmd.Wait has reaped the process
	paused bool          // guarded by Server.mu
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (which also ends a stopped process) and waits until the
// process has been reaped, so no zombie remains.
func (p *process) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
	p.paused = false
}

// Start starts a private redis-server for the test on a free loopback port
// and registers its cleanup (SIGKILL and reap) with t.Cleanup. It returns once
// the server answers; any failure, including a missing binary, fails the test
// with t.Fatalf.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := lookBinary("redis-server", "REDIS_SERVER")
	if err != nil {
		t.Fatalf("%v", err)
	}
	return start(t, bin, false, opts)
}

func start(t testing.TB, bin string, cluster bool, opts []Option) *Server {
	t.Helper()
	return launchNew(t, &Server{bin: bin, cluster: cluster}, opts)
}

// launchNew completes s, whose bin and role are set, and starts its first
// process on a free port, retrying on another port when the port is taken.
func launchNew(t testing.TB, s *Server, opts []Option) *Server {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s.tb, s.dir, s.extra = t, t.TempDir(), o.args
	// Registered after TempDir, so it runs before the directory is removed.
	t.Cleanup(s.cleanup)

	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for range startAttempts {
		port, err := freePort(s.cluster)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := s.resetDir(false); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		if s.sentinelConf != "" {
			if err := os.WriteFile(s.sentinelPath(), []byte(s.sentinelConf), 0o644); err != nil {
				t.Fatalf("redistest: %v", err)
			}
		}
		p, err := s.launch(port)
		if err == nil {
			s.port, s.addr, s.proc = port, loopback(port), p
			return s
		}
		if !errors.Is(err, errBindFailed) && !errors.Is(err, errForeign) {
			t.Fatalf("%v", err)
		}
		errs = append(errs, err)
	}
	t.Fatalf("redistest: could not start redis-server in %d attempts: %v", startAttempts, errors.Join(errs...))
	return nil
}

func (s *Server) cleanup() {
	if s.tb.Failed() {
		addr := s.addr
		if addr == "" {
			addr = "(start failed)"
		}
		s.tb.Logf("redistest: redis-server %s (dir %s), log tail:\n%s", addr, s.dir, s.logTail(0, 0))
	}
	s.Kill()
}

// Addr returns the server's "127.0.0.1:PORT" address; it stays the same
// across Restart, so clients created before a restart reconnect to it.
func (s *Server) Addr() string { return s.addr }

// PID returns the process id of the current redis-server process, or of the
// last one if it is no longer running, so a test can check on the process
// itself (for example with signal 0 after Kill).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastPID
}

// Running reports whether the server process is alive (a paused server is
// alive). It turns false after Kill or when the process died on its own.
func (s *Server) Running() bool {
	running, _ := s.state()
	return running
}

func (s *Server) state() (running, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return false, false
	}
	return true, s.proc.paused
}

// Kill sends SIGKILL to the server and waits until the process is gone,
// simulating a crash: clients see connection errors afterwards and the data
// is lost. It is a no-op when the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
	}
}

// Pause stops the server with SIGSTOP and returns once the process is
// stopped, simulating a hung server: the kernel still accepts TCP connections
// on its port but no command is answered until Resume. It is a no-op when the
// server is not running or already paused.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || p.exited() || p.paused {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	p.paused = true
	waitThreads(p, true)
}

// Resume continues a paused server with SIGCONT; it answers again with its
// data intact. It is a no-op when the server is not paused.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || p.exited() || !p.paused {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.paused = false
	waitThreads(p, false)
}

// Restart kills the server if it is running (also when paused) and starts a
// new process on the same port with an empty dataset, returning once it
// answers. A cluster node keeps its nodes.conf, so it comes back as the same
// node owning the same slots (see Cluster); a Sentinel keeps its
// configuration file, which holds its state. Failure fails the test.
func (s *Server) Restart() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
	}
	if err := s.resetDir(true); err != nil {
		s.tb.Fatalf("redistest: restarting %s: %v", s.addr, err)
	}
	// redis-server binds with SO_REUSEADDR, so TIME_WAIT from the old process
	// does not block it; retrying only covers another process briefly holding
	// the port (for example as an outgoing connection's source port).
	deadline := time.Now().Add(rebindTimeout)
	for {
		p, err := s.launch(s.port)
		if err == nil {
			s.proc = p
			return
		}
		if !errors.Is(err, errBindFailed) || time.Now().After(deadline) {
			s.tb.Fatalf("redistest: Restart: %s", strings.TrimPrefix(err.Error(), "redistest: "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Flush runs FLUSHALL on this server through its own short-lived
// connection, so a test can reset data without restarting. Failure (for
// example because the server is killed or paused) fails the test.
func (s *Server) Flush() {
	s.tb.Helper()
	if _, err := s.Do("FLUSHALL"); err != nil {
		s.tb.Fatalf("redistest: FLUSHALL on %s: %v", s.addr, err)
	}
}

// Do runs one command on a new short-lived connection and returns its reply
// as go-redis' Do does (RESP3), for test set-up and inspection such as
// CONFIG SET, SCRIPT FLUSH or INFO. The connection verifies that it talks to
// this package's process and uses 2 s timeouts; Do fails fast with an error
// when the server is not running or is paused.
func (s *Server) Do(args ...any) (any, error) {
	running, paused := s.state()
	switch {
	case !running:
		return nil, fmt.Errorf("redistest: redis-server %s is not running", s.addr)
	case paused:
		return nil, fmt.Errorf("redistest: redis-server %s is paused", s.addr)
	}
	c := redis.NewClient(internalOptions(s.addr, s.PID))
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*opTimeout)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// Client returns a new go-redis client for this server, closed by t.Cleanup.
// It starts from go-redis' defaults with Addr set; opts can adjust the
// options, typically to set short timeouts and retries for failure tests.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// internalOptions configures the package's own short-lived clients: short
// timeouts, no retries, no optional handshakes, and an OnConnect check that
// the server answering on addr is the process whose pid wantPID reports.
func internalOptions(addr string, wantPID func() int) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		DialTimeout:              opTimeout,
		ReadTimeout:              opTimeout,
		WriteTimeout:             opTimeout,
		MaxRetries:               -1,
		DialerRetries:            1,
		PoolSize:                 1,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			info, err := cn.Info(ctx, "server").Result()
			if err != nil {
				return err
			}
			return checkPID(addr, info, wantPID())
		},
	}
}

// checkPID returns errForeign unless the INFO server text reports want.
func checkPID(addr, info string, want int) error {
	got, err := parseInfoPID(info)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("redistest: %s: %w (pid %d, want %d)", addr, errForeign, got, want)
	}
	return nil
}

func parseInfoPID(info string) (int, error) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("redistest: INFO server has no process_id")
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// freePort returns a loopback port nobody listens on; with bus it also
// checks port+10000, the cluster bus port. The port is released before
// returning, so a launch can still lose a race for it and is retried.
func freePort(bus bool) (int, error) {
	var lastErr error
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redistest: no free loopback port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			_ = l.Close()
			return port, nil
		}
		if port+busOffset > 65535 {
			_ = l.Close()
			continue
		}
		bl, err := net.Listen("tcp", loopback(port+busOffset))
		_ = l.Close()
		if err != nil {
			lastErr = err
			continue
		}
		_ = bl.Close()
		return port, nil
	}
	return 0, fmt.Errorf("redistest: no free loopback port pair (port, port+%d): %v", busOffset, lastErr)
}

func (s *Server) logPath() string      { return filepath.Join(s.dir, logFile) }
func (s *Server) outPath() string      { return filepath.Join(s.dir, outFile) }
func (s *Server) sentinelPath() string { return filepath.Join(s.dir, sentinelFile) }

// args returns the redis-server command line for port. Persistence is off
// (empty save, no AOF) so a killed or restarted server always comes back
// empty, and the log goes to a file so failures can quote it.
func (s *Server) args(port int) []string {
	var a []string
	if s.sentinelConf != "" {
		// Sentinel mode needs a configuration file, first, that it can
		// rewrite; the other arguments are applied on top of it.
		a = append(a, s.sentinelPath(), "--sentinel")
	}
	a = append(a,
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--daemonize", "no",
		"--supervised", "no",
		"--dir", s.dir,
		"--logfile", s.logPath(),
		"--loglevel", "notice",
		"--syslog-enabled", "no",
		"--always-show-logo", "no",
		"--save", "",
		"--appendonly", "no",
		"--maxmemory-policy", "noeviction",
	)
	if s.cluster {
		a = append(a,
			"--cluster-enabled", "yes",
			// Relative to --dir; Restart keeps it so the node keeps its
			// identity and slots.
			"--cluster-config-file", nodesFile,
			// Failure detection after ~1 s keeps failure tests fast.
			"--cluster-node-timeout", "1000",
			// Without replicas a killed master's slots stay uncovered; with
			// full coverage required the whole cluster would refuse every
			// key. "no" lets only that master's slots fail, as in production
			// clusters configured for partial availability.
			"--cluster-require-full-coverage", "no",
		)
	}
	return append(a, s.extra...)
}

// resetDir removes everything from the server's directory except the logs
// (and, when keepState, a cluster node's nodes.conf and a Sentinel's
// configuration file), so a launch starts with an empty dataset.
func (s *Server) resetDir(keepState bool) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		switch name := e.Name(); {
		case name == logFile, name == outFile, keepState && (name == nodesFile || name == sentinelFile):
		default:
			if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// launch starts one redis-server process on port and waits until it
// answers. On failure the process is killed and reaped, and the error quotes
// the log; it wraps errBindFailed or errForeign when the port was taken.
func (s *Server) launch(port int) (*process, error) {
	logOff, outOff := fileSize(s.logPath()), fileSize(s.outPath())
	out, err := os.OpenFile(s.outPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	cmd := exec.Command(s.bin, s.args(port)...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	// Pdeathsig kills the server if the test binary dies without running
	// cleanups (e.g. a go test -timeout panic), so no orphan keeps the port.
	// Linux delivers it when the forking OS thread exits; the Go runtime only
	// ends threads whose goroutine exits while locked with LockOSThread.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = out.Close()
	if err != nil {
		return nil, fmt.Errorf("redistest: starting %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	s.lastPID = p.pid

	addr := loopback(port)
	err = waitReady(addr, p)
	if err == nil {
		return p, nil
	}
	exited := p.exited()
	p.kill()
	fresh := readFrom(s.logPath(), logOff) + readFrom(s.outPath(), outOff)
	if exited && strings.Contains(fresh, "Address already in use") {
		err = fmt.Errorf("%w: %v", errBindFailed, err)
	}
	return nil, fmt.Errorf("redistest: redis-server %s (pid %d, dir %s): %w; log tail:\n%s",
		addr, p.pid, s.dir, err, s.logTail(logOff, outOff))
}

// waitReady polls addr until the server answers INFO (a superset of PING
// that also tells which process answered). It gives up when the process
// exits, when another process answers, or after readyTimeout.
func waitReady(addr string, p *process) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if p.exited() {
			return errors.New("exited before answering")
		}
		pid, err := probePID(addr, 250*time.Millisecond)
		if err == nil {
			if pid != p.pid {
				return fmt.Errorf("%w (pid %d answered, ours is %d)", errForeign, pid, p.pid)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("did not answer within %v: %v", readyTimeout, err)
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// probePID sends INFO server over a raw connection and returns the
// answering process id; it is deliberately independent of go-redis so
// readiness polling creates no client state.
func probePID(addr string, timeout time.Duration) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "$") {
		return 0, fmt.Errorf("unexpected reply to INFO: %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("unexpected reply to INFO: %q", line)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	return parseInfoPID(string(body[:n]))
}

// waitThreads waits (bounded) until all threads of p are stopped (stopped
// true) or none is (stopped false), so Pause and Resume take effect before
// they return. It reads /proc, so it is Linux-only; on error it just returns.
func waitThreads(p *process, stopped bool) {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && !p.exited() {
		all, ok := threadsStopped(p.pid, stopped)
		if !ok || all {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func threadsStopped(pid int, stopped bool) (all, ok bool) {
	taskDir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(taskDir)
	if err != nil {
		return false, false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(taskDir, t.Name(), "stat"))
		if err != nil {
			return false, false
		}
		// The state is the first field after the parenthesised command name.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			return false, false
		}
		if (b[i+2] == 'T') != stopped {
			return false, true
		}
	}
	return true, true
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the content of path from offset off (at most the last
// tailMaxRead bytes of it).
func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	if size := fileSize(path); size-off > tailMaxRead {
		off = size - tailMaxRead
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, tailMaxRead))
	return string(b)
}

// logTail returns the last lines of the server log and of its stdout/stderr
// (where redis-server reports configuration errors), each from the given
// offset on.
func (s *Server) logTail(logOff, outOff int64) string {
	var b strings.Builder
	for _, f := range []struct {
		name, path string
		off        int64
	}{{logFile, s.logPath(), logOff}, {"stdout/stderr", s.outPath(), outOff}} {
		text := strings.TrimRight(readFrom(f.path, f.off), "\n")
		if text == "" {
			continue
		}
		lines := strings.Split(text, "\n")
		if len(lines) > tailLines {
			lines = lines[len(lines)-tailLines:]
		}
		fmt.Fprintf(&b, "--- %s ---\n%s\n", f.name, strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(empty)\n"
	}
	return b.String()
}
