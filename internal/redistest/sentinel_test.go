package redistest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withRetries lets a failover client retry a command a connection closed by
// a failover broke, as applications configure it.
func withRetries(o *redis.FailoverOptions) {
	o.MaxRetries = 3
	o.MinRetryBackoff = 10 * time.Millisecond
	o.MaxRetryBackoff = 100 * time.Millisecond
}

// role returns the replication role srv reports: "master" or "slave".
func role(t *testing.T, srv *Server) string {
	t.Helper()
	info, err := srv.Do("INFO", "replication")
	require.NoError(t, err)
	return infoFields(info)["role"]
}

// TestSentinel walks one setup through its life: data written through the
// failover client, a graceful failover, a killed master, the killed master
// back as a replica.
func TestSentinel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	begin := time.Now()
	s := StartSentinel(t)
	t.Logf("StartSentinel took %v", time.Since(begin))

	servers := s.Servers()
	require.Len(t, servers, 2)
	first, second := servers[0], servers[1]
	assert.Regexp(t, `^mymaster-[0-9a-f]{8}$`, s.MasterName())
	assert.Same(t, first, s.Master())
	assert.Same(t, second, s.Replica())
	assert.Equal(t, "master", role(t, first))
	assert.Equal(t, "slave", role(t, second))
	addrs := append(s.SentinelAddrs(), first.Addr(), second.Addr())
	assert.Len(t, slices.Compact(slices.Sorted(slices.Values(addrs))), 5, "distinct addresses")
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", host)
		assert.NotContains(t, []string{"6379", "26379"}, port, "must never use the machine's default ports")
	}

	c := s.Client(t, withRetries)
	require.NoError(t, c.Set(ctx, "before", "1", 0).Err())
	got, err := c.Get(ctx, "before").Result()
	require.NoError(t, err)
	assert.Equal(t, "1", got)
	v, err := first.Do("GET", "before")
	require.NoError(t, err)
	assert.Equal(t, "1", v, "the client wrote to the master")
	assert.EventuallyWithT(t, func(t *assert.CollectT) {
		v, err := second.Do("GET", "before")
		assert.NoError(t, err)
		assert.Equal(t, "1", v, "and the replica has it")
	}, 5*time.Second, 10*time.Millisecond)

	// A graceful failover: the replica becomes the master with every write
	// acknowledged before, the old master its replica. The client follows.
	const burst = 500
	for i := range burst {
		require.NoError(t, c.Set(ctx, fmt.Sprint("burst:", i), i, 0).Err())
	}
	begin = time.Now()
	s.Failover(t)
	t.Logf("Failover took %v", time.Since(begin))
	assert.Same(t, second, s.Master())
	assert.Same(t, first, s.Replica())
	assert.Equal(t, "master", role(t, second))
	assert.Equal(t, "slave", role(t, first))
	n, err := second.Do("DBSIZE")
	require.NoError(t, err)
	assert.EqualValues(t, burst+1, n, "the new master has every write made before the failover")

	got, err = c.Get(ctx, "before").Result()
	require.NoError(t, err, "the client keeps working after the failover")
	assert.Equal(t, "1", got)
	require.NoError(t, c.Set(ctx, "after-failover", "2", 0).Err())
	v, err = second.Do("GET", "after-failover")
	require.NoError(t, err)
	assert.Equal(t, "2", v, "the client writes to the new master")
	_, err = first.Do("SET", "x", "y")
	assert.ErrorContains(t, err, "READONLY", "the old master is a read-only replica now")

	// The master crashes: the sentinels promote the replica, with what it had
	// replicated (here, once it has the last write).
	assert.EventuallyWithT(t, func(t *assert.CollectT) {
		v, err := first.Do("GET", "after-failover")
		assert.NoError(t, err)
		assert.Equal(t, "2", v)
	}, 5*time.Second, 10*time.Millisecond)
	begin = time.Now()
	killed := s.KillMaster(t)
	t.Logf("KillMaster took %v (until the replica was promoted)", time.Since(begin))
	assert.Same(t, second, killed)
	assert.False(t, killed.Running())
	assert.Same(t, first, s.Master())
	assert.Same(t, second, s.Replica(), "Replica is the killed server until it is restarted")
	assert.Equal(t, "master", role(t, first))

	begin = time.Now()
	got, err = c.Get(ctx, "after-failover").Result()
	require.NoError(t, err, "the client reaches the promoted replica")
	assert.Equal(t, "2", got, "it had replicated the write")
	require.NoError(t, c.Set(ctx, "after-kill", "3", 0).Err())
	t.Logf("the client's first commands after KillMaster took %v", time.Since(begin))
	v, err = first.Do("GET", "after-kill")
	require.NoError(t, err)
	assert.Equal(t, "3", v)

	// The killed master comes back, empty, as a replica: it resyncs.
	begin = time.Now()
	s.RestartAsReplica(t, killed)
	t.Logf("RestartAsReplica took %v", time.Since(begin))
	assert.True(t, killed.Running())
	assert.Equal(t, "slave", role(t, killed))
	v, err = killed.Do("GET", "after-kill")
	require.NoError(t, err)
	assert.Equal(t, "3", v, "the restarted replica synced the master's data")

	// And the setup can fail over again, back to it.
	s.Failover(t)
	assert.Same(t, killed, s.Master())
	got, err = c.Get(ctx, "after-kill").Result()
	require.NoError(t, err)
	assert.Equal(t, "3", got)
}

// TestSentinelClientsFollowEveryFailover checks that a client made before
// any failover, used without retries between failovers, follows several of
// them in a row, and that a fresh client finds the current master.
func TestSentinelClientsFollowEveryFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartSentinel(t)
	c := s.Client(t, func(o *redis.FailoverOptions) { o.MaxRetries = -1 })
	require.NoError(t, c.Set(ctx, "k", 0, 0).Err())
	for i := 1; i <= 3; i++ {
		s.Failover(t)
		// Failover returns after the sentinels announced the switch and the
		// old master, now a replica, dropped its clients: no command of an
		// old connection remains to fail.
		n, err := c.Incr(ctx, "k").Result()
		require.NoError(t, err, "failover %d", i)
		assert.EqualValues(t, i, n)
		fresh := s.Client(t, func(o *redis.FailoverOptions) { o.MaxRetries = -1 })
		got, err := fresh.Get(ctx, "k").Int()
		require.NoError(t, err)
		assert.Equal(t, i, got)
	}
}

// TestSentinelPausedMaster: a master that hangs (SIGSTOP) is failed over by
// the sentinels on their own; WaitHealthy waits for it, and after Resume for
// the old master to be turned into a replica.
func TestSentinelPausedMaster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartSentinel(t)
	c := s.Client(t, withRetries)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	old, next := s.Master(), s.Replica()
	// Replication is asynchronous: a master stopped right after a write may
	// never pass it on, and the failover then loses it.
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		v, err := next.Do("GET", "k")
		assert.NoError(t, err)
		assert.Equal(t, "v", v)
	}, 5*time.Second, 10*time.Millisecond)

	old.Pause()
	begin := time.Now()
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		m, err := s.reported()
		require.NoError(t, err)
		assert.Equal(t, slices.Repeat([]string{next.Addr()}, 3), m)
	}, sentinelWait, 50*time.Millisecond, "the sentinels fail the hung master over")
	s.WaitHealthy(t)
	t.Logf("a hung master was failed over after %v", time.Since(begin))
	assert.Same(t, next, s.Master())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)

	old.Resume()
	begin = time.Now()
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		info, err := old.Do("INFO", "replication")
		require.NoError(t, err)
		assert.Equal(t, "slave", infoFields(info)["role"])
	}, sentinelWait, 50*time.Millisecond, "the sentinels demote the resumed master")
	s.WaitHealthy(t)
	t.Logf("the resumed master was a replica in sync %v after Resume", time.Since(begin))
	assert.Same(t, old, s.Replica())
}

// TestSentinelOutlastsAStall: a master that does not answer for seconds,
// as one does on a starved CPU (make test-under-load), is not failed over:
// the sentinels fail over a master that is gone, not one that is slow. At
// down-after-milliseconds 1000 the sentinels failed a starved master over
// (and back) of their own accord while StartSentinel waited, and it failed
// the test it set up.
func TestSentinelOutlastsAStall(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	m := s.Master()
	m.Pause()
	time.Sleep(3 * time.Second) // three times what down-after-milliseconds 1000 allowed
	m.Resume()
	s.WaitHealthy(t)
	assert.Same(t, m, s.Master())
	for _, sen := range s.sentinels {
		reply, err := sen.Do("SENTINEL", "MASTER", s.name)
		require.NoError(t, err)
		st, err := replyMap(reply)
		require.NoError(t, err)
		assert.Equal(t, "0", st["config-epoch"], "sentinel %s: no failover, not even there and back", sen.Addr())
	}
}

// TestSentinelClientStaysInside: whatever the options say, the client of a
// setup connects to nothing else.
func TestSentinelClientStaysInside(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartSentinel(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	c := s.Client(t, func(o *redis.FailoverOptions) {
		o.SentinelAddrs = []string{l.Addr().String()}
		o.MaxRetries = -1
		o.DialerRetries = 1
	})
	err = c.Ping(ctx).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a server of this Sentinel setup")

	// A custom dialer still goes through the check, and is used.
	dialed := make(chan string, 16)
	c = s.Client(t, func(o *redis.FailoverOptions) {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialed <- addr
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	})
	require.NoError(t, c.Ping(ctx).Err())
	assert.Contains(t, s.SentinelAddrs(), <-dialed, "first a sentinel")
	var later []string
	for len(dialed) > 0 {
		later = append(later, <-dialed)
	}
	assert.Contains(t, later, s.Master().Addr(), "then the master")
}

// TestSentinelNeverTouchesForeignServers: after KillMaster the sentinels
// keep reconnecting to the killed master's port, and when another process's
// redis-server answers there they try to turn it into a replica. Their
// SLAVEOF is renamed, so the stranger ignores it; and a client of the setup
// refuses a connection the stranger answers.
func TestSentinelNeverTouchesForeignServers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartSentinel(t)
	killed := s.KillMaster(t)

	// Another test's server takes the port.
	foreign := Start(t)
	foreign.Kill()
	foreign.port, foreign.addr = killed.port, killed.addr
	foreign.Restart()
	_, err := foreign.Do("SET", "mine", "1")
	require.NoError(t, err)

	converting := "+convert-to-slave slave " + killed.Addr()
	require.Eventually(t, func() bool {
		for _, sen := range s.sentinels {
			if strings.Contains(readFrom(sen.logPath(), 0), converting) {
				return true
			}
		}
		return false
	}, 15*time.Second, 50*time.Millisecond, "the sentinels try to reconfigure what answers on the old master's port")
	time.Sleep(200 * time.Millisecond) // what they sent has been processed
	assert.Equal(t, "master", role(t, foreign), "the stranger ignored it")
	v, err := foreign.Do("GET", "mine")
	require.NoError(t, err)
	assert.Equal(t, "1", v, "and kept its data")
	assert.NotContains(t, readFrom(foreign.logPath(), 0), "REPLICAOF")

	c := s.Client(t, func(o *redis.FailoverOptions) {
		o.MaxRetries = -1
		o.DialerRetries = 1
		o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, foreign.Addr())
		}
	})
	err = c.Ping(ctx).Err()
	require.Error(t, err)
	assert.ErrorContains(t, err, "refusing a connection answered by pid")
}

// TestSentinelFailsClearly: the operations refuse what cannot work at once,
// instead of after a long wait.
func TestSentinelFailsClearly(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	msg := expectFatal(t, func(tb testing.TB) { s.RestartAsReplica(tb, s.Master()) })
	assert.Contains(t, msg, "is the current master")
	msg = expectFatal(t, func(tb testing.TB) { s.RestartAsReplica(tb, Start(tb)) })
	assert.Contains(t, msg, "not a data server of this Sentinel setup")

	s.Replica().Kill()
	begin := time.Now()
	msg = expectFatal(t, func(tb testing.TB) { s.Failover(tb) })
	assert.Contains(t, msg, "nothing to fail over to")
	msg = expectFatal(t, func(tb testing.TB) { s.KillMaster(tb) })
	assert.Contains(t, msg, "nothing to fail over to")
	// At once, not after sentinelWait (two minutes): a third of it only
	// catches the long wait, whatever the machine's load.
	assert.Less(t, time.Since(begin), sentinelWait/3)
	assert.True(t, s.Master().Running(), "KillMaster left the master alone")
}

// TestSentinelCleanup proves that no process of a Sentinel setup outlives
// its test, whatever state it was left in.
func TestSentinelCleanup(t *testing.T) {
	t.Parallel()
	var pids []int
	var dirs []string
	t.Run("inner", func(t *testing.T) {
		s := StartSentinel(t)
		s.Master().Pause()
		for _, srv := range slices.Concat(s.Servers(), s.sentinels) {
			pids = append(pids, srv.PID())
			dirs = append(dirs, srv.dir)
		}
	})
	require.Len(t, pids, 5)
	for _, pid := range pids {
		assert.True(t, processGone(pid), "pid %d still exists after its test ended", pid)
	}
	for _, dir := range dirs {
		assert.NoDirExists(t, dir, "temp dir removed after its test ended")
	}
}
