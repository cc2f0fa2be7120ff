// Package redisproc runs a private redis-server process: on a free loopback
// port, in a directory of its own, with nothing persisted, so a program can
// kill it, pause it and restart it empty to show what the limiter does. The
// command line's demo and chaos commands use it; it never touches a Redis it
// did not start.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// readyTimeout bounds how long a launch may take to answer PING.
const readyTimeout = 10 * time.Second

// LookPath finds redis-server: REDIS_SERVER if set, else on PATH. Its error
// is one sentence naming what to install.
func LookPath() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redisproc: redis-server not found on PATH; install Redis 6.2 or newer (apt-get install redis-server) or set REDIS_SERVER")
	}
	return p, nil
}

// Server is a redis-server process this program started. It is safe for
// concurrent use.
type Server struct {
	bin  string
	dir  string
	port int
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start launches redis-server on a free loopback port, with extra arguments
// args, and returns once it answers PING.
func Start(args ...string) (*Server, error) {
	bin, err := LookPath()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "hybridlimit-redis-")
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, port: port, args: args}
	if err := s.launch(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Addr is "127.0.0.1:PORT", the same across restarts.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Pid is the process id of the running (or last) redis-server, 0 before
// the first launch.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill stops the process with SIGKILL and waits until it is gone.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused process dies the same
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Pause stops the process with SIGSTOP: connections are accepted, nothing
// is answered.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Restart kills the process if it runs and starts it again on the same port,
// empty.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
	deadline := time.Now().Add(readyTimeout)
	for {
		err := s.launchLocked()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // the port may linger in TIME_WAIT
	}
}

// Close kills the process and removes its directory.
func (s *Server) Close() error {
	s.Kill()
	return os.RemoveAll(s.dir)
}

func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.launchLocked()
}

func (s *Server) launchLocked() error {
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive this program
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisproc: start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("redisproc: redis-server exited at start (see %s)", filepath.Join(s.dir, "redis.log"))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redisproc: redis-server did not answer within %v: %w", readyTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisproc: no free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
