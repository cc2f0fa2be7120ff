package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shortTimeouts makes a client fail fast: failure tests must not wait for
// go-redis' multi-second defaults.
func shortTimeouts(o *redis.Options) {
	o.DialTimeout = 300 * time.Millisecond
	o.ReadTimeout = 300 * time.Millisecond
	o.WriteTimeout = 300 * time.Millisecond
	o.MaxRetries = -1
	o.DialerRetries = 1
}

// processGone reports whether no process (not even a zombie) has pid.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestStartAnswersAndStoresData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := Start(t)

	host, port, err := net.SplitHostPort(s.Addr())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	assert.NotEqual(t, "6379", port, "must never use the machine's default Redis port")
	assert.True(t, s.Running())

	c := s.Client(t)
	require.NoError(t, c.Ping(ctx).Err())
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)

	info, err := s.Do("INFO", "server")
	require.NoError(t, err)
	pid, err := parseInfoPID(info.(string))
	require.NoError(t, err)
	assert.Equal(t, s.PID(), pid, "the server answering on Addr is the process Start launched")

	for param, want := range map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1"} {
		reply, err := s.Do("CONFIG", "GET", param)
		require.NoError(t, err)
		assert.Equal(t, map[any]any{param: want}, reply, "CONFIG GET %s", param)
	}
	assert.FileExists(t, s.logPath(), "the server logs into its temp dir")
}

func TestKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := Start(t)
	before := s.Client(t, shortTimeouts)
	require.NoError(t, before.Set(ctx, "k", "v", 0).Err())
	pid := s.PID()

	s.Kill()
	assert.False(t, s.Running())
	assert.True(t, processGone(pid), "signal 0 to pid %d must fail after Kill", pid)
	assert.Equal(t, pid, s.PID(), "PID reports the last process after Kill")
	s.Kill() // idempotent

	// A client that had a connection open notices the loss one way or another.
	assert.Error(t, before.Get(ctx, "k").Err())
	// A new connection is refused.
	err := s.Client(t, shortTimeouts).Get(ctx, "k").Err()
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)

	_, err = s.Do("PING")
	assert.ErrorContains(t, err, "not running")
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := Start(t)
	c := s.Client(t, shortTimeouts)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	s.Pause()
	s.Pause() // idempotent
	assert.True(t, s.Running(), "a paused server is still running")

	conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	require.NoError(t, err, "the kernel still accepts connections for a stopped process")
	require.NoError(t, conn.Close())

	begin := time.Now()
	err = c.Get(ctx, "k").Err()
	var netErr net.Error
	require.ErrorAs(t, err, &netErr)
	assert.True(t, netErr.Timeout(), "want a timeout, got %v", err)
	// At the client's 300 ms read timeout, not when the server resumes: ten
	// times that only catches a hang.
	assert.Less(t, time.Since(begin), 10*300*time.Millisecond)

	_, err = s.Do("PING")
	assert.ErrorContains(t, err, "paused")

	s.Resume()
	s.Resume() // idempotent
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got, "data survives a pause")
}

func TestRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		before func(*Server)
	}{
		{"running", func(*Server) {}},
		{"killed", (*Server).Kill},
		{"paused", (*Server).Pause},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := Start(t)
			c := s.Client(t)
			require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
			addr, pid := s.Addr(), s.PID()

			tc.before(s)
			s.Restart()

			assert.Equal(t, addr, s.Addr(), "same address after Restart")
			assert.NotEqual(t, pid, s.PID())
			assert.True(t, processGone(pid), "the old process is gone")
			assert.True(t, s.Running())
			// A fresh client answers at once and sees an empty dataset.
			fresh := s.Client(t, shortTimeouts)
			require.NoError(t, fresh.Ping(ctx).Err())
			assert.ErrorIs(t, fresh.Get(ctx, "k").Err(), redis.Nil, "data is gone after Restart")
			n, err := fresh.DBSize(ctx).Result()
			require.NoError(t, err)
			assert.Zero(t, n)
			// A client created before the restart reconnects (go-redis retries
			// a broken pooled connection).
			assert.ErrorIs(t, c.Get(ctx, "k").Err(), redis.Nil)
		})
	}
}

func TestFlush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := Start(t)
	c := s.Client(t)
	for i := range 10 {
		require.NoError(t, c.Set(ctx, fmt.Sprint("k", i), i, 0).Err())
	}
	pid := s.PID()

	s.Flush()

	n, err := c.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Equal(t, pid, s.PID(), "Flush does not restart")
}

func TestWithArgsMaxmemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := Start(t, WithArgs("--maxmemory", "1mb"))

	reply, err := s.Do("CONFIG", "GET", "maxmemory")
	require.NoError(t, err)
	assert.Equal(t, map[any]any{"maxmemory": "1048576"}, reply)

	c := s.Client(t)
	err = c.Set(ctx, "big", strings.Repeat("x", 2<<20), 0).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OOM")
}

func TestDo(t *testing.T) {
	t.Parallel()
	s := Start(t)
	for _, tc := range []struct {
		name    string
		args    []any
		want    any
		wantErr string
	}{
		{name: "config set", args: []any{"CONFIG", "SET", "maxmemory", "2mb"}, want: "OK"},
		{name: "config get sees it", args: []any{"CONFIG", "GET", "maxmemory"}, want: map[any]any{"maxmemory": "2097152"}},
		{name: "script flush", args: []any{"SCRIPT", "FLUSH"}, want: "OK"},
		{name: "set", args: []any{"SET", "k", "v"}, want: "OK"},
		{name: "get", args: []any{"GET", "k"}, want: "v"},
		{name: "error reply", args: []any{"NOSUCHCOMMAND"}, wantErr: "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Do(tc.args...)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	info, err := s.Do("INFO", "server")
	require.NoError(t, err)
	assert.Contains(t, info, "redis_version:")
}

// TestConcurrentUse exercises every method from several goroutines at once,
// for the race detector.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	s := Start(t)
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 20 {
				_ = s.Running()
				_ = s.PID()
				_ = s.Addr()
				_, _ = s.Do("PING")
			}
		}()
	}
	for range 3 {
		s.Pause()
		s.Resume()
		s.Kill()
		s.Restart()
	}
	for range 4 {
		<-done
	}
	_, err := s.Do("PING")
	assert.NoError(t, err)
}

// TestCleanupKillsProcesses proves that no redis-server outlives its test,
// whatever state it was left in.
func TestCleanupKillsProcesses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) []*Server
	}{
		{"running", func(t *testing.T) []*Server { return []*Server{Start(t)} }},
		{"paused", func(t *testing.T) []*Server {
			s := Start(t)
			s.Pause()
			return []*Server{s}
		}},
		{"restarted", func(t *testing.T) []*Server {
			s := Start(t)
			s.Restart()
			return []*Server{s}
		}},
		{"killed", func(t *testing.T) []*Server {
			s := Start(t)
			s.Kill()
			return []*Server{s}
		}},
		{"cluster", func(t *testing.T) []*Server {
			c := StartCluster(t, 3)
			c.Masters()[0].Pause()
			return c.Masters()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var pids []int
			var dirs []string
			t.Run("inner", func(t *testing.T) {
				for _, s := range tc.start(t) {
					pids = append(pids, s.PID())
					dirs = append(dirs, s.dir)
				}
			})
			require.NotEmpty(t, pids)
			for _, pid := range pids {
				assert.True(t, processGone(pid), "pid %d still exists after its test ended", pid)
			}
			for _, dir := range dirs {
				assert.NoDirExists(t, dir, "temp dir removed after its test ended")
			}
		})
	}
}

// fatalTB records the first Fatalf instead of failing the real test. Fatalf
// ends the calling goroutine like the real one, so run code under test with
// expectFatal.
type fatalTB struct {
	testing.TB
	msg chan string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg <- fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fatalTB) Fatal(args ...any) {
	f.msg <- fmt.Sprint(args...)
	runtime.Goexit()
}

// expectFatal runs fn with a testing.TB whose Fatalf is captured, and returns
// the failure message (failing t when there was none). Cleanups that fn
// registers still run with t.
func expectFatal(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	tb := &fatalTB{TB: t, msg: make(chan string, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	select {
	case msg := <-tb.msg:
		return msg
	default:
		t.Fatal("expected the test to be failed with Fatalf")
		return ""
	}
}

func TestStartFailsClearly(t *testing.T) {
	t.Parallel()
	t.Run("bad argument quotes the log", func(t *testing.T) {
		t.Parallel()
		msg := expectFatal(t, func(tb testing.TB) { Start(tb, WithArgs("--no-such-directive", "1")) })
		assert.Contains(t, msg, "log tail")
		assert.Contains(t, msg, "no-such-directive", "redis-server's own complaint is quoted")
	})
	t.Run("cluster needs three masters", func(t *testing.T) {
		t.Parallel()
		msg := expectFatal(t, func(tb testing.TB) { StartCluster(tb, 2) })
		assert.Contains(t, msg, "at least 3 masters")
	})
}

func TestRestartFailsWhenPortIsTaken(t *testing.T) {
	t.Parallel()
	var s *Server
	msg := expectFatal(t, func(tb testing.TB) {
		s = Start(tb)
		s.Kill()
		// Somebody else grabs the port while the server is down.
		l, err := net.Listen("tcp", s.Addr())
		if err != nil {
			tb.Fatalf("listen: %v", err)
		}
		defer func() { _ = l.Close() }()
		s.Restart()
	})
	assert.Contains(t, msg, "Address already in use")
	assert.False(t, s.Running())
}

// The tests below change the environment, so they must not run in parallel.

func TestBinary(t *testing.T) {
	t.Run("from PATH", func(t *testing.T) {
		t.Setenv("REDIS_SERVER", "")
		t.Setenv("REDIS_CLI", "")
		server, cli, err := Binary()
		require.NoError(t, err)
		assert.Equal(t, "redis-server", filepath.Base(server))
		assert.Equal(t, "redis-cli", filepath.Base(cli))
	})
	t.Run("from environment", func(t *testing.T) {
		server, cli, err := Binary()
		require.NoError(t, err)
		link := filepath.Join(t.TempDir(), "my-redis-server")
		require.NoError(t, os.Symlink(server, link))
		t.Setenv("REDIS_SERVER", link)
		t.Setenv("REDIS_CLI", cli)
		gotServer, gotCLI, err := Binary()
		require.NoError(t, err)
		assert.Equal(t, link, gotServer)
		assert.Equal(t, cli, gotCLI)

		s := Start(t)
		assert.True(t, s.Running(), "Start uses $REDIS_SERVER")
	})
	server, _, err := Binary()
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		env      map[string]string
		contains []string
	}{
		{
			name:     "server not on PATH",
			env:      map[string]string{"REDIS_SERVER": "", "PATH": "/nonexistent"},
			contains: []string{"redis-server not found on PATH", "install Redis", "REDIS_SERVER"},
		},
		{
			name:     "cli not on PATH",
			env:      map[string]string{"REDIS_SERVER": server, "REDIS_CLI": "", "PATH": "/nonexistent"},
			contains: []string{"redis-cli not found on PATH", "REDIS_CLI"},
		},
		{
			name:     "bad REDIS_SERVER",
			env:      map[string]string{"REDIS_SERVER": "/nonexistent/redis-server"},
			contains: []string{`REDIS_SERVER="/nonexistent/redis-server"`, "not an executable"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, _, err := Binary()
			require.Error(t, err)
			for _, want := range tc.contains {
				assert.Contains(t, err.Error(), want)
			}
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
	t.Run("Start fails the test with the sentence", func(t *testing.T) {
		t.Setenv("REDIS_SERVER", "")
		t.Setenv("PATH", "/nonexistent")
		msg := expectFatal(t, func(tb testing.TB) { Start(tb) })
		assert.Equal(t, "redistest: redis-server not found on PATH; install Redis 6.2+ (apt-get install redis-server) or set REDIS_SERVER", msg)
	})
	t.Run("StartCluster fails the test when redis-cli is missing", func(t *testing.T) {
		t.Setenv("REDIS_SERVER", server)
		t.Setenv("REDIS_CLI", "")
		t.Setenv("PATH", "/nonexistent")
		msg := expectFatal(t, func(tb testing.TB) { StartCluster(tb, 3) })
		assert.Contains(t, msg, "redis-cli not found on PATH")
	})
}
