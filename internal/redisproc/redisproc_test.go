package redisproc

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T) *Server {
	t.Helper()
	s, err := Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func client(t *testing.T, s *Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestStartIsPrivateAndOnLoopback(t *testing.T) {
	s := start(t)
	host, port, err := net.SplitHostPort(s.Addr())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	assert.NotEqual(t, "6379", port, "a test must never get the machine's default Redis")
	assert.NotZero(t, s.Pid())

	ctx := context.Background()
	c := client(t, s)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	dir, err := c.ConfigGet(ctx, "dir").Result()
	require.NoError(t, err)
	assert.Equal(t, s.dir, filepath.Clean(dir["dir"]))
	save, err := c.ConfigGet(ctx, "save").Result()
	require.NoError(t, err)
	assert.Empty(t, save["save"], "nothing may be persisted")
}

func TestExtraArgumentsReachTheServer(t *testing.T) {
	s, err := Start("--maxmemory", "12mb")
	require.NoError(t, err)
	defer s.Close()
	got, err := client(t, s).ConfigGet(context.Background(), "maxmemory").Result()
	require.NoError(t, err)
	assert.Equal(t, "12582912", got["maxmemory"])
}

func TestPauseThenResume(t *testing.T) {
	s := start(t)
	c := client(t, s)
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())

	s.Pause()
	err := c.Ping(ctx).Err()
	require.Error(t, err, "a paused server answers nothing")
	var ne net.Error
	assert.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout(), "a paused server accepts and stays silent: %v", err)

	s.Resume()
	assert.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 10*time.Second, 20*time.Millisecond)
}

func TestKillThenRestartEmptyOnTheSamePort(t *testing.T) {
	s := start(t)
	c := client(t, s)
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	addr, pid := s.Addr(), s.Pid()

	s.Kill()
	_, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	assert.Error(t, err, "a killed server still accepts connections")
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process %d still exists", pid)

	require.NoError(t, s.Restart())
	assert.Equal(t, addr, s.Addr())
	assert.NotEqual(t, pid, s.Pid())
	assert.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 10*time.Second, 20*time.Millisecond)
	n, err := c.Exists(ctx, "k").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a restarted server starts empty")
}

func TestRestartAPausedServer(t *testing.T) {
	s := start(t)
	s.Pause()
	require.NoError(t, s.Restart())
	assert.NoError(t, client(t, s).Ping(context.Background()).Err())
}

func TestCloseStopsAndCleansUp(t *testing.T) {
	s, err := Start()
	require.NoError(t, err)
	pid, dir := s.Pid(), s.dir
	require.NoError(t, s.Close())
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH)
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "directory %s left behind", dir)
	assert.NoError(t, s.Close(), "Close twice")
}

func TestMissingBinaryIsOneClearSentence(t *testing.T) {
	t.Setenv("REDIS_SERVER", "")
	t.Setenv("PATH", t.TempDir())
	_, err := Start()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "redis-server not found")
	assert.Contains(t, err.Error(), "install Redis")
	assert.NotContains(t, err.Error(), "\n", "one line: %q", err)
}

func TestBinaryThatExitsAtStart(t *testing.T) {
	t.Setenv("REDIS_SERVER", "/bin/false")
	_, err := Start()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exited at start")
}
