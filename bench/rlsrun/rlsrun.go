// Package rlsrun runs rate limit services side by side for the comparison:
// hybridlimit's (the hybridlimit binary's rls command) and
// envoyproxy/ratelimit's (its service_cmd, pinned and built by the
// Makefile into bench/.bin), each as a child process on free loopback
// ports, configured by the same environment variables (envoyproxy/ratelimit's)
// and the same configuration directory, against a Redis the caller names.
package rlsrun

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Kind is which service.
type Kind int

const (
	// Ours is hybridlimit rls.
	Ours Kind = iota
	// Theirs is envoyproxy/ratelimit.
	Theirs
)

func (k Kind) String() string {
	if k == Ours {
		return "hybridlimit"
	}
	return "envoyproxy/ratelimit"
}

// Version is the envoyproxy/ratelimit version the Makefile builds: the
// module version of github.com/envoyproxy/ratelimit, pinned in
// ratelimit.version (the one place it is written).
var Version = strings.TrimSpace(versionFile)

//go:embed ratelimit.version
var versionFile string

// Bins are the binaries, found in a directory (bench/.bin).
type Bins struct {
	Ours, Theirs, TheirsCheck string
}

// FindBins returns the binaries in dir, or an error saying how to build
// the missing ones.
func FindBins(dir string, needTheirs bool) (Bins, error) {
	b := Bins{Ours: filepath.Join(dir, "hybridlimit"), Theirs: filepath.Join(dir, "service_cmd"), TheirsCheck: filepath.Join(dir, "config_check_cmd")}
	need := []string{b.Ours}
	if needTheirs {
		need = append(need, b.Theirs, b.TheirsCheck)
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("rlsrun: %s missing: run make rls-peer from the repository root (it builds hybridlimit and envoyproxy/ratelimit %s into bench/.bin)", p, Version)
		}
	}
	return b, nil
}

// WriteConfig lays out files (name → YAML) as envoyproxy/ratelimit's
// runtime directory under root: root/ratelimit/config/NAME.
func WriteConfig(root string, files map[string]string) error {
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Options configures an instance.
type Options struct {
	// Root is the runtime root WriteConfig laid out.
	Root string
	// Redis is the Redis address, host:port.
	Redis string
	// Env adds variables (NAME=value), after the defaults.
	Env []string
	// Log receives the instance's output; nil discards it.
	Log *os.File
}

// Instance is one running service.
type Instance struct {
	Kind  Kind
	GRPC  string // host:port
	Admin string // host:port of the HTTP listener
	cmd   *exec.Cmd
	done  chan error
}

// freePort returns a loopback port free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Start launches a service of kind from bins with opts, and waits until it
// answers ShouldRateLimit for domain.
func Start(ctx context.Context, kind Kind, bins Bins, domain string, opts Options) (*Instance, error) {
	ports := make([]int, 3)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	env := append(os.Environ(),
		// The same environment for both: envoyproxy/ratelimit's variables.
		"RUNTIME_ROOT="+opts.Root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=SINGLE", "REDIS_URL="+opts.Redis,
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[0]),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
		"USE_STATSD=false", "LOG_LEVEL=warn",
	)
	env = append(env, opts.Env...)
	var cmd *exec.Cmd
	switch kind {
	case Ours:
		cmd = exec.Command(bins.Ours, "rls")
	case Theirs:
		cmd = exec.Command(bins.Theirs)
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = opts.Log, opts.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the run
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("rlsrun: start %v: %w", kind, err)
	}
	in := &Instance{Kind: kind, GRPC: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), Admin: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])), cmd: cmd, done: make(chan error, 1)}
	go func() { in.done <- cmd.Wait() }()
	if err := in.waitReady(ctx, domain); err != nil {
		in.Stop()
		return nil, err
	}
	return in, nil
}

// waitReady waits until the instance answers a request for domain.
func (in *Instance) waitReady(ctx context.Context, domain string) error {
	conn, err := grpc.NewClient(in.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "rlsrun-ready", Value: "probe"}}}}}
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-in.done:
			in.done <- err
			return fmt.Errorf("rlsrun: %v exited before it was ready: %v", in.Kind, err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		c, cancel := context.WithTimeout(ctx, time.Second)
		_, last = client.ShouldRateLimit(c, req)
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("rlsrun: %v not ready after 30s: %v", in.Kind, last)
}

// Stop sends SIGTERM, waits up to 15 s for a clean exit, then kills.
func (in *Instance) Stop() error {
	if in.cmd.Process == nil {
		return nil
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-in.done:
		in.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) && strings.Contains(ee.Error(), "signal") {
			return nil // envoyproxy/ratelimit dies of its SIGTERM
		}
		return err
	case <-time.After(15 * time.Second):
		_ = in.cmd.Process.Kill()
		err := <-in.done
		in.done <- err
		return fmt.Errorf("rlsrun: %v did not stop within 15s (killed)", in.Kind)
	}
}

// CheckConfig runs envoyproxy/ratelimit's config checker on dir, and
// reports whether it accepted the files, with its output.
func CheckConfig(bins Bins, dir string) (bool, string) {
	out, err := exec.Command(bins.TheirsCheck, "-config_dir", dir).CombinedOutput()
	return err == nil, string(out)
}

// Metric sums the values of the series of the instance's /metrics (the
// Prometheus text format on its admin listener) whose name and labels
// start with series, such as `rate_limit_sync_round_duration_seconds_sum{result="ok"`.
// It reads hybridlimit's metrics; envoyproxy/ratelimit serves none there.
func (in *Instance) Metric(ctx context.Context, series string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.Admin+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	found := false
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, series) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("rlsrun: %s: %q", series, line)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("rlsrun: no series %s in %s/metrics", series, in.Admin)
	}
	return sum, nil
}

// Pid is the instance's process id.
func (in *Instance) Pid() int { return in.cmd.Process.Pid }

// ProcStats are a process's CPU time and memory, read from /proc.
type ProcStats struct {
	CPU      time.Duration // user and system time since it started
	RSS, HWM int64         // resident set size now, and its peak, in bytes
}

// Proc reads the instance's CPU time and memory from /proc (Linux).
func (in *Instance) Proc() (ProcStats, error) { return ReadProc(in.Pid()) }

// clockTicks is the kernel's USER_HZ: the unit of /proc/PID/stat's times.
// It is 100 on every Linux architecture Go runs on.
const clockTicks = 100

// ReadProc reads pid's CPU time and memory from /proc (Linux).
func ReadProc(pid int) (ProcStats, error) {
	var st ProcStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// Fields after the command name (which may hold spaces), in
	// parentheses: state is field 3, utime 14 and stime 15.
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return st, fmt.Errorf("rlsrun: /proc/%d/stat: %q", pid, stat)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return st, fmt.Errorf("rlsrun: /proc/%d/stat: %w", pid, err)
	}
	st.CPU = time.Duration(utime+stime) * time.Second / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var kb int64
		if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			st.RSS = kb << 10
		case "VmHWM":
			st.HWM = kb << 10
		}
	}
	return st, nil
}
