package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelCount and sentinelQuorum: three sentinels, two of which must
	// agree that the master is down before one of them fails it over (and a
	// majority, two, must elect that one).
	sentinelCount  = 3
	sentinelQuorum = 2
	// downAfterMs is how long the master must not answer before a sentinel
	// considers it down (down-after-milliseconds). A server on a starved CPU
	// (make test-under-load: stress-ng on every core beside the suite) can
	// miss a second: at 1 s the sentinels failed masters over, and back, of
	// their own accord, during set-up and mid-test. Five seconds gives a
	// starved server five times the room (TestSentinelOutlastsAStall stalls
	// one for three), and costs four seconds in KillMaster.
	downAfterMs = 5000
	// failoverTimeoutMs is Sentinel's failover-timeout: how long a started
	// failover may take before it is aborted, and (doubled) how long after an
	// attempt the sentinels wait before trying again. A promotion a starved
	// replica acknowledges late is not aborted (and undone) before 6 s.
	failoverTimeoutMs = 6000
	// sentinelWait bounds every wait of this file. A failover takes a few
	// seconds (see Sentinel), more on a loaded machine: a sentinel whose
	// timer ran late enters TILT and does nothing for 30 s, and a split vote
	// retries after twice the failover-timeout. The bound only catches a
	// stuck setup.
	sentinelWait = 2 * time.Minute
	// clientTimeout is the default dial, read and write timeout of the
	// clients Sentinel.Client returns.
	clientTimeout = 500 * time.Millisecond
	// writeProbeKey is deleted to check that a master accepts writes. It
	// never exists, so the check changes no data and replicates nothing.
	writeProbeKey = "redistest:write-probe"
)

// sentinelTuning is the SENTINEL DEBUG arguments (Redis 7.0+) every sentinel
// gets at start: INFO every 250 ms instead of 10 s, so role changes are
// seen quickly; hello messages every 250 ms instead of 2 s, so the sentinels
// find each other at once, and a master demoted by a failover is turned into
// a replica after 1 s (4 hello periods) instead of 8 s; and peers asked about
// a master that looks down every 250 ms instead of every second. During a
// failover Sentinel polls replicas every second whatever is configured.
func sentinelTuning() []any {
	return []any{"SENTINEL", "DEBUG", "info-period", 250, "publish-period", 250, "ask-period", 250}
}

// Sentinel is a Redis Sentinel setup owned by one test: a master, one
// replica of it and three sentinels (quorum 2) monitoring them under the
// name MasterName. The master and the replica are ordinary *Server values
// (Servers); which one is the master changes with failovers, so ask Master
// and Replica. It is safe for concurrent use, but run one failure operation
// (Failover, KillMaster, RestartAsReplica) at a time.
//
// Sentinels act on their own, on addresses: they keep reconnecting to a
// killed server's port and would reconfigure (SLAVEOF) whatever answers
// there, and they adopt the configuration other sentinels announce for a
// master of the same name. So that a setup never touches a Redis it did not
// start, even when another test's server takes a freed port, each setup
// monitors a master name of its own ("mymaster-" and random hex), and its
// data servers run with SLAVEOF renamed to a random name that only its own
// sentinels use (rename-command): on anybody else's server their
// reconfiguration is an unknown command, and does nothing. REPLICAOF, the
// same command under its current name, is left alone for tests to use.
//
// The sentinels consider a master down after 5 s without an answer
// (down-after-milliseconds 5000: a starved CPU must not fail a master over),
// use a failover-timeout of 6 s and are tuned with SENTINEL DEBUG to poll
// every 250 ms (see sentinelTuning), which needs Redis 7.0 or later.
// StartSentinel then takes about 0.5 s. A graceful Failover switches the
// master after about 1 s (Sentinel waits for the promoted replica's next
// INFO, polled every second during a failover) and returns after
// 2.5-3.5 s, once the old master has been demoted and has resynced. A
// killed or hung master is replaced after 6-7.5 s (down after 5 s, then
// agreement, a random delay of up to 1 s and the election), and after
// about 20 s in the rare case where the sentinels split their votes and
// retry.
// The sentinels are not exposed: their log tails are reported, like every
// server's, when the test fails.
//
// Data servers have no configuration file: Sentinel's CONFIG REWRITE after
// reconfiguring them fails (harmlessly), and a plain Restart brings a server
// back as an empty master; use RestartAsReplica to bring a server back into
// the setup.
type Sentinel struct {
	tb        testing.TB
	name      string    // the master name, unique to the setup
	data      []*Server // the first master and the first replica, in start order
	sentinels []*Server
}

// StartSentinel starts a master, a replica of it and three sentinels
// monitoring them, and returns once every sentinel reports the same master,
// knows the two other sentinels and sees the replica in sync. That master is
// almost always the first one started; should the sentinels have failed it
// over while the setup converged (a machine starved for seconds), it is the
// other, and the setup is as healthy: Servers lists the master StartSentinel
// returns with first. Options apply to the master and the replica, not to
// the sentinels. Cleanup and failure reporting are as for Start.
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	bin, err := lookBinary("redis-server", "REDIS_SERVER")
	if err != nil {
		t.Fatalf("%v", err)
	}
	slaveof := "redistest-slaveof-" + randomHex(t, 8)
	dataOpts := append([]Option{WithArgs(
		// By default a master waits 5 s for more replicas before a full sync.
		"--repl-diskless-sync-delay", "0",
		"--rename-command", "SLAVEOF", slaveof,
	)}, opts...)
	master := start(t, bin, false, dataOpts)
	replica := start(t, bin, false, dataOpts)
	s := &Sentinel{tb: t, name: "mymaster-" + randomHex(t, 4), data: []*Server{master, replica}}
	s.replicate(t, replica, master)

	conf := fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d
sentinel down-after-milliseconds %[1]s %[4]d
sentinel failover-timeout %[1]s %[5]d
sentinel parallel-syncs %[1]s 1
sentinel rename-command %[1]s SLAVEOF %[6]s
sentinel deny-scripts-reconfig yes
`, s.name, master.port, sentinelQuorum, downAfterMs, failoverTimeoutMs, slaveof)
	for range sentinelCount {
		sen := launchNew(t, &Server{bin: bin, sentinelConf: conf}, nil)
		if _, err := sen.Do(sentinelTuning()...); err != nil {
			t.Fatalf("redistest: SENTINEL DEBUG on sentinel %s: %v (StartSentinel needs redis-server 7.0 or later)", sen.Addr(), err)
		}
		s.sentinels = append(s.sentinels, sen)
	}
	s.waitHealthy(t, nil)
	if m := s.master(t); m != master {
		s.data[0], s.data[1] = m, master
	}
	return s
}

// MasterName returns the name the sentinels monitor the master under, for
// redis.FailoverOptions.MasterName: "mymaster-" and hex digits unique to the
// setup.
func (s *Sentinel) MasterName() string { return s.name }

// SentinelAddrs returns the sentinels' "127.0.0.1:PORT" addresses, for
// redis.FailoverOptions.SentinelAddrs.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sen := range s.sentinels {
		addrs[i] = sen.Addr()
	}
	return addrs
}

// Servers returns the two data servers, the master StartSentinel returned
// with first. The slice is a copy; the servers are shared.
func (s *Sentinel) Servers() []*Server { return slices.Clone(s.data) }

// Master returns the data server that a majority of the sentinels report as
// the master now. Failure to ask them fails the test.
func (s *Sentinel) Master() *Server {
	s.tb.Helper()
	return s.master(s.tb)
}

// Replica returns the data server that is not Master (after KillMaster and
// until RestartAsReplica, the killed one).
func (s *Sentinel) Replica() *Server {
	s.tb.Helper()
	return s.other(s.master(s.tb))
}

// Client returns a new go-redis failover client for the setup, closed by
// t.Cleanup: it asks the sentinels for the master and follows failovers. It
// starts from go-redis' defaults with MasterName, SentinelAddrs and 500 ms
// dial, read and write timeouts; opts can adjust the options, typically
// retries. go-redis never enables maintenance notifications on a failover
// client. Whatever opts set, the client only ever talks to this setup's
// processes: a dial to another address fails, and so does a connection
// answered by another process (checked with INFO server before opts'
// OnConnect runs), as when the sentinels still name a killed master whose
// port somebody else has taken.
func (s *Sentinel) Client(t testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{
		MasterName:    s.name,
		SentinelAddrs: s.SentinelAddrs(),
		DialTimeout:   clientTimeout,
		ReadTimeout:   clientTimeout,
		WriteTimeout:  clientTimeout,
	}
	for _, f := range opts {
		f(o)
	}
	o.Dialer = s.guardDialer(o.Dialer, o.DialTimeout)
	o.OnConnect = s.guardConnect(o.OnConnect)
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// guardDialer wraps dial (nil: a plain TCP dial with timeout) so that it
// refuses any address that is not one of the setup's servers.
func (s *Sentinel) guardDialer(dial func(context.Context, string, string) (net.Conn, error), timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	own := map[string]bool{}
	for _, srv := range slices.Concat(s.data, s.sentinels) {
		own[srv.Addr()] = true
	}
	if dial == nil {
		if timeout <= 0 {
			timeout = 5 * time.Second // go-redis' default
		}
		d := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !own[addr] {
			return nil, fmt.Errorf("redistest: refusing to connect to %s, which is not a server of this Sentinel setup", addr)
		}
		return dial(ctx, network, addr)
	}
}

// guardConnect wraps onConnect (which may be nil) with a check that the
// process answering is one of the setup's.
func (s *Sentinel) guardConnect(onConnect func(context.Context, *redis.Conn) error) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		info, err := cn.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		pid, err := parseInfoPID(info)
		if err != nil {
			return err
		}
		if !s.ownsPID(pid) {
			return fmt.Errorf("redistest: refusing a connection answered by pid %d, which is not a process of this Sentinel setup", pid)
		}
		if onConnect != nil {
			return onConnect(ctx, cn)
		}
		return nil
	}
}

// ownsPID reports whether pid is a running process of the setup. It reads
// the servers that are not busy first: a server being restarted holds its
// lock for the whole launch, and the process answering a client is almost
// always another one, which need not wait for it.
func (s *Sentinel) ownsPID(pid int) bool {
	is := func(srv *Server) bool { return srv.proc != nil && !srv.proc.exited() && srv.proc.pid == pid }
	var busy []*Server
	for _, srv := range slices.Concat(s.data, s.sentinels) {
		if !srv.mu.TryLock() {
			busy = append(busy, srv)
			continue
		}
		ours := is(srv)
		srv.mu.Unlock()
		if ours {
			return true
		}
	}
	for _, srv := range busy {
		srv.mu.Lock()
		ours := is(srv)
		srv.mu.Unlock()
		if ours {
			return true
		}
	}
	return false
}

// Failover makes the sentinels fail the master over to the replica
// gracefully (SENTINEL FAILOVER): it waits until the replica has every write
// the master acknowledged so far, asks for the failover, waits until every
// sentinel reports the old replica as the master and it accepts writes, and
// then until the old master has been turned into a replica of it and is in
// sync. Writes the old master accepts during the failover (by clients that
// have not switched yet) are lost, as in production. Failure, including a
// setup that is not healthy at the start, fails the test.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	old := s.master(t)
	next := s.other(old)
	s.needReplica(t, "Failover", next)
	s.waitHealthy(t, old) // the replica is in sync and a candidate for every sentinel
	s.waitCaughtUp(t, old, next)

	deadline := time.Now().Add(sentinelWait)
	sen := s.sentinels[0]
	issued := false
	for {
		switched, err := s.switched(next)
		if switched {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: Failover: the sentinels did not promote %s within %v: %v", next.Addr(), sentinelWait, err)
		}
		if !issued || s.aborted(sen, old) {
			_, err := sen.Do("SENTINEL", "FAILOVER", s.name)
			switch {
			case err == nil:
				issued = true
			case strings.HasPrefix(err.Error(), "INPROG"), strings.HasPrefix(err.Error(), "NOGOODSLAVE"):
				// A failover is still winding down, or the sentinel's view
				// of the replica is a moment old: ask again.
			default:
				t.Fatalf("redistest: SENTINEL FAILOVER on %s: %v", sen.Addr(), err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.waitHealthy(t, next)
}

// KillMaster kills the master (SIGKILL) and waits until the sentinels have
// promoted the replica: every sentinel reports it as the master and it
// accepts writes. Writes the killed master had not replicated yet are lost.
// It returns the killed server, which RestartAsReplica brings back. Failure,
// including a setup that is not healthy at the start, fails the test.
func (s *Sentinel) KillMaster(t testing.TB) *Server {
	t.Helper()
	old := s.master(t)
	next := s.other(old)
	s.needReplica(t, "KillMaster", next)
	s.waitHealthy(t, old)
	old.Kill()
	s.waitHealthy(t, next)
	return old
}

// RestartAsReplica restarts srv, one of Servers (killing it first if it is
// running), with an empty dataset as a replica of the current master, and
// returns once it is in sync and every sentinel sees it as a healthy replica.
// srv must not be the current master. Failure fails the test.
func (s *Sentinel) RestartAsReplica(t testing.TB, srv *Server) {
	t.Helper()
	if !slices.Contains(s.data, srv) {
		t.Fatalf("redistest: RestartAsReplica: %s is not a data server of this Sentinel setup", srv.Addr())
	}
	m := s.master(t)
	if srv == m {
		t.Fatalf("redistest: RestartAsReplica: %s is the current master; Failover or KillMaster first", srv.Addr())
	}
	srv.Restart()
	s.replicate(t, srv, m)
	s.waitHealthy(t, m)
}

// WaitHealthy waits until the setup has converged, failing the test after
// two minutes: every sentinel reports the same running master, which accepts
// writes, sees it as up and knows the other sentinels, and every running
// replica is in sync with the master and seen as a healthy replica by every
// sentinel. Killed or paused data servers are not checked.
func (s *Sentinel) WaitHealthy(t testing.TB) {
	t.Helper()
	s.waitHealthy(t, nil)
}

// needReplica fails the test at once when r, the server op would promote,
// is not running, rather than after a long wait.
func (s *Sentinel) needReplica(t testing.TB, op string, r *Server) {
	t.Helper()
	if running, paused := r.state(); !running || paused {
		t.Fatalf("redistest: %s: the replica %s is not running (or paused): there is nothing to fail over to; RestartAsReplica it first", op, r.Addr())
	}
}

// replicate makes r a replica of m.
func (s *Sentinel) replicate(t testing.TB, r, m *Server) {
	t.Helper()
	if _, err := r.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(m.port)); err != nil {
		t.Fatalf("redistest: REPLICAOF %s on %s: %v", m.Addr(), r.Addr(), err)
	}
}

// master returns the data server a majority of the sentinels report.
func (s *Sentinel) master(t testing.TB) *Server {
	t.Helper()
	addrs, err := s.reported()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	votes := map[string]int{}
	for _, a := range addrs {
		votes[a]++
		if votes[a] > len(addrs)/2 {
			if m := s.byAddr(a); m != nil {
				return m
			}
			t.Fatalf("redistest: the sentinels report master %s, which is not a server of this Sentinel setup", a)
		}
	}
	t.Fatalf("redistest: the sentinels do not agree on a master: %v", addrs)
	return nil
}

// other returns the data server that is not m.
func (s *Sentinel) other(m *Server) *Server {
	if s.data[0] == m {
		return s.data[1]
	}
	return s.data[0]
}

func (s *Sentinel) byAddr(addr string) *Server {
	for _, d := range s.data {
		if d.Addr() == addr {
			return d
		}
	}
	return nil
}

// reported returns the master address each sentinel reports, in order.
func (s *Sentinel) reported() ([]string, error) {
	addrs := make([]string, len(s.sentinels))
	for i, sen := range s.sentinels {
		reply, err := sen.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.name)
		if err != nil {
			return nil, fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME on %s: %w", sen.Addr(), err)
		}
		hp, ok := reply.([]any)
		if !ok || len(hp) != 2 {
			return nil, fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME on %s: unexpected reply %v", sen.Addr(), reply)
		}
		addrs[i] = net.JoinHostPort(fmt.Sprint(hp[0]), fmt.Sprint(hp[1]))
	}
	return addrs, nil
}

// switched reports whether every sentinel reports next as the master.
func (s *Sentinel) switched(next *Server) (bool, error) {
	addrs, err := s.reported()
	if err != nil {
		return false, err
	}
	for i, a := range addrs {
		if a != next.Addr() {
			return false, fmt.Errorf("sentinel %s reports master %s", s.sentinels[i].Addr(), a)
		}
	}
	return true, nil
}

// aborted reports whether sen still reports old as the master with no
// failover in progress: a requested failover was aborted (or never began).
func (s *Sentinel) aborted(sen, old *Server) bool {
	reply, err := sen.Do("SENTINEL", "MASTER", s.name)
	if err != nil {
		return false
	}
	m, err := replyMap(reply)
	if err != nil {
		return false
	}
	return net.JoinHostPort(m["ip"], m["port"]) == old.Addr() && !strings.Contains(m["flags"], "failover_in_progress")
}

// waitCaughtUp waits until r has processed every write m acknowledged before
// the call.
func (s *Sentinel) waitCaughtUp(t testing.TB, m, r *Server) {
	t.Helper()
	info, err := m.Do("INFO", "replication")
	if err != nil {
		t.Fatalf("redistest: INFO replication on %s: %v", m.Addr(), err)
	}
	want, err := strconv.ParseInt(infoFields(info)["master_repl_offset"], 10, 64)
	if err != nil {
		t.Fatalf("redistest: %s reports no master_repl_offset: %v", m.Addr(), err)
	}
	deadline := time.Now().Add(sentinelWait)
	for {
		info, err := r.Do("INFO", "replication")
		var got int64
		if err == nil {
			got, err = strconv.ParseInt(infoFields(info)["slave_repl_offset"], 10, 64)
		}
		if err == nil && got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s did not reach offset %d of master %s within %v (at %d, %v)", r.Addr(), want, m.Addr(), sentinelWait, got, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitHealthy waits until checkHealthy passes, with want as the master
// (nil: whichever the sentinels agree on).
func (s *Sentinel) waitHealthy(t testing.TB, want *Server) {
	t.Helper()
	deadline := time.Now().Add(sentinelWait)
	for {
		err := s.checkHealthy(want)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: Sentinel setup not healthy after %v: %v", sentinelWait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Sentinel) checkHealthy(want *Server) error {
	addrs, err := s.reported()
	if err != nil {
		return err
	}
	for i, a := range addrs {
		if a != addrs[0] {
			return fmt.Errorf("sentinel %s reports master %s, sentinel %s reports %s",
				s.sentinels[0].Addr(), addrs[0], s.sentinels[i].Addr(), a)
		}
	}
	m := s.byAddr(addrs[0])
	switch {
	case m == nil:
		return fmt.Errorf("the sentinels report master %s, which is not a server of this Sentinel setup", addrs[0])
	case want != nil && m != want:
		return fmt.Errorf("the sentinels report master %s, want %s", m.Addr(), want.Addr())
	}
	if running, paused := m.state(); !running || paused {
		return fmt.Errorf("the master the sentinels report, %s, is not running (or paused)", m.Addr())
	}
	info, err := m.Do("INFO", "replication")
	if err != nil {
		return fmt.Errorf("INFO replication on master %s: %w", m.Addr(), err)
	}
	if role := infoFields(info)["role"]; role != "master" {
		return fmt.Errorf("master %s reports role %q", m.Addr(), role)
	}
	if _, err := m.Do("DEL", writeProbeKey); err != nil {
		return fmt.Errorf("master %s does not accept writes: %w", m.Addr(), err)
	}

	var replicas []*Server
	for _, d := range s.data {
		if running, paused := d.state(); d != m && running && !paused {
			replicas = append(replicas, d)
		}
	}
	mhost, mport, _ := net.SplitHostPort(m.Addr())
	for _, r := range replicas {
		info, err := r.Do("INFO", "replication")
		if err != nil {
			return fmt.Errorf("INFO replication on replica %s: %w", r.Addr(), err)
		}
		f := infoFields(info)
		if f["role"] != "slave" || f["master_host"] != mhost || f["master_port"] != mport ||
			f["master_link_status"] != "up" || f["master_sync_in_progress"] != "0" {
			return fmt.Errorf("%s is not an in-sync replica of %s: role %s, master %s:%s, link %s, sync in progress %s",
				r.Addr(), m.Addr(), f["role"], f["master_host"], f["master_port"], f["master_link_status"], f["master_sync_in_progress"])
		}
	}

	for _, sen := range s.sentinels {
		reply, err := sen.Do("SENTINEL", "MASTER", s.name)
		if err != nil {
			return fmt.Errorf("SENTINEL MASTER on %s: %w", sen.Addr(), err)
		}
		st, err := replyMap(reply)
		if err != nil {
			return fmt.Errorf("SENTINEL MASTER on %s: %w", sen.Addr(), err)
		}
		if st["flags"] != "master" {
			return fmt.Errorf("sentinel %s flags master %s as %s", sen.Addr(), m.Addr(), st["flags"])
		}
		if st["num-other-sentinels"] != strconv.Itoa(len(s.sentinels)-1) {
			return fmt.Errorf("sentinel %s knows %s other sentinels, want %d", sen.Addr(), st["num-other-sentinels"], len(s.sentinels)-1)
		}
		reply, err = sen.Do("SENTINEL", "REPLICAS", s.name)
		if err != nil {
			return fmt.Errorf("SENTINEL REPLICAS on %s: %w", sen.Addr(), err)
		}
		seen, err := replyMaps(reply)
		if err != nil {
			return fmt.Errorf("SENTINEL REPLICAS on %s: %w", sen.Addr(), err)
		}
		for _, r := range replicas {
			i := slices.IndexFunc(seen, func(v map[string]string) bool { return net.JoinHostPort(v["ip"], v["port"]) == r.Addr() })
			if i < 0 {
				return fmt.Errorf("sentinel %s does not know replica %s yet", sen.Addr(), r.Addr())
			}
			v := seen[i]
			if v["flags"] != "slave" || v["role-reported"] != "slave" || v["master-link-status"] != "ok" ||
				net.JoinHostPort(v["master-host"], v["master-port"]) != m.Addr() {
				return fmt.Errorf("sentinel %s sees replica %s as %s (role %s, link %s, master %s:%s)",
					sen.Addr(), r.Addr(), v["flags"], v["role-reported"], v["master-link-status"], v["master-host"], v["master-port"])
			}
		}
	}
	return nil
}

// randomHex returns n random bytes in hex.
func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return hex.EncodeToString(b)
}

// infoFields parses an INFO reply into its "field:value" pairs.
func infoFields(reply any) map[string]string {
	text, _ := reply.(string)
	f := map[string]string{}
	for line := range strings.Lines(text) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			f[k] = v
		}
	}
	return f
}

// replyMap reads a Sentinel reply describing one instance: a map in RESP3,
// a flat list of field-value pairs in RESP2.
func replyMap(reply any) (map[string]string, error) {
	out := map[string]string{}
	switch r := reply.(type) {
	case map[any]any:
		for k, v := range r {
			out[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	case []any:
		if len(r)%2 != 0 {
			return nil, fmt.Errorf("odd number of fields in %v", r)
		}
		for i := 0; i < len(r); i += 2 {
			out[fmt.Sprint(r[i])] = fmt.Sprint(r[i+1])
		}
	default:
		return nil, fmt.Errorf("unexpected reply %T %v", reply, reply)
	}
	return out, nil
}

// replyMaps reads a Sentinel reply describing a list of instances.
func replyMaps(reply any) ([]map[string]string, error) {
	list, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %T %v", reply, reply)
	}
	out := make([]map[string]string, 0, len(list))
	for _, item := range list {
		m, err := replyMap(item)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}
