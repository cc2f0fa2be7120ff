package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	// clusterSlots is the number of hash slots of a Redis Cluster.
	clusterSlots = 16384
	// createTimeout bounds redis-cli --cluster create (normally 1-2 s, most
	// of it redis-cli's own one-second polling while the nodes join).
	createTimeout = 30 * time.Second
	// healthyTimeout bounds WaitHealthy. Recovery after a master restart
	// takes about 2-3 s (see Cluster); the bound only catches a stuck cluster.
	healthyTimeout = 20 * time.Second
)

// Cluster is a Redis Cluster of masters without replicas, each master a
// *Server owned by the test. It is safe for concurrent use.
//
// Nodes run with cluster-node-timeout 1000 (a dead master is flagged FAIL
// after about a second) and cluster-require-full-coverage no, so a killed or
// paused master only fails the keys in its own slots while the other masters
// keep serving theirs. That needs a majority of masters alive: with 3
// masters, killing 2 makes the survivor declare the cluster down.
//
// Restart on a master keeps its nodes.conf (and only its nodes.conf): the
// new process comes back with the same node id, epoch and slots, but an empty
// dataset, and rejoins by itself. The others clear its FAIL flag once it
// answers again and at least 2 node timeouts have passed since it was
// flagged, and the restarted master reports cluster_state:ok only after its
// own 2 s rejoin delay, so recovery takes about 2-3 s; WaitHealthy waits for
// it.
type Cluster struct {
	tb      testing.TB
	masters []*Server
	slots   [][]slotRange // slots[i]: slots owned by masters[i] after creation
	probes  []string      // probes[i]: a key whose slot masters[i] owns
}

// slotRange is an inclusive range of hash slots.
type slotRange struct{ from, to int }

// StartCluster starts masters (at least 3) cluster-enabled redis-server
// processes, joins them into one cluster without replicas with
// redis-cli --cluster create (slots split evenly, in the order of Masters),
// and returns once the cluster is healthy. Options apply to every node.
// Cleanup and failure reporting are as for Start.
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: StartCluster needs at least 3 masters, got %d (redis-cli --cluster create refuses fewer)", masters)
	}
	server, cli, err := Binary()
	if err != nil {
		t.Fatalf("%v", err)
	}
	c := &Cluster{tb: t}
	for range masters {
		c.masters = append(c.masters, start(t, server, true, opts))
	}
	c.create(t, cli)
	c.loadSlots(t)
	c.WaitHealthy(t)
	return c
}

// create runs redis-cli --cluster create over all masters.
func (c *Cluster) create(t testing.TB, cli string) {
	t.Helper()
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	// A password in the caller's environment would make redis-cli AUTH
	// against servers that have none.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "REDISCLI_AUTH=")
	})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: %s %s: %v\n%s", cli, strings.Join(args, " "), err, out)
	}
}

// loadSlots records which slots each master owns, from its own CLUSTER NODES
// line, and picks one probe key per master for WaitHealthy.
func (c *Cluster) loadSlots(t testing.TB) {
	t.Helper()
	c.slots = make([][]slotRange, len(c.masters))
	c.probes = make([]string, len(c.masters))
	total := 0
	for i, m := range c.masters {
		reply, err := m.Do("CLUSTER", "NODES")
		if err != nil {
			t.Fatalf("redistest: CLUSTER NODES on %s: %v", m.Addr(), err)
		}
		text, _ := reply.(string)
		for line := range strings.Lines(text) {
			f := strings.Fields(line)
			if len(f) < 8 || !slices.Contains(strings.Split(f[2], ","), "myself") {
				continue
			}
			for _, r := range f[8:] {
				if strings.HasPrefix(r, "[") { // migrating/importing marker
					continue
				}
				from, to, ok := parseSlotRange(r)
				if !ok {
					t.Fatalf("redistest: %s: cannot parse slot range %q in %q", m.Addr(), r, line)
				}
				c.slots[i] = append(c.slots[i], slotRange{from, to})
				total += to - from + 1
			}
		}
		if len(c.slots[i]) == 0 {
			t.Fatalf("redistest: master %s owns no slots after cluster create:\n%s", m.Addr(), text)
		}
	}
	if total != clusterSlots {
		t.Fatalf("redistest: masters own %d slots after cluster create, want %d", total, clusterSlots)
	}
	for i := range c.masters {
		for n := 0; ; n++ {
			key := "redistest:probe:" + strconv.Itoa(n)
			if c.owner(keySlot(key)) == i {
				c.probes[i] = key
				break
			}
		}
	}
}

func parseSlotRange(s string) (from, to int, ok bool) {
	a, b, isRange := strings.Cut(s, "-")
	from, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, false
	}
	to = from
	if isRange {
		if to, err = strconv.Atoi(b); err != nil {
			return 0, 0, false
		}
	}
	return from, to, from <= to && to < clusterSlots
}

// owner returns the index of the master owning slot, or -1.
func (c *Cluster) owner(slot int) int {
	for i, ranges := range c.slots {
		for _, r := range ranges {
			if r.from <= slot && slot <= r.to {
				return i
			}
		}
	}
	return -1
}

// Addrs returns the client addresses of all masters, in the order of
// Masters; they stay valid across restarts of individual masters.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.masters))
	for i, m := range c.masters {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Masters returns the masters, so a test can Kill, Pause, Restart, Flush or
// inspect one of them. The slice is a copy; the servers are shared.
func (c *Cluster) Masters() []*Server { return slices.Clone(c.masters) }

// MasterFor returns the master that owns key's hash slot (honouring {hash
// tags}), so a test can fail exactly the node a key lives on. Ownership is
// the one assigned at StartCluster; the package never moves slots.
func (c *Cluster) MasterFor(key string) *Server {
	return c.masters[c.owner(keySlot(key))]
}

// Client returns a new go-redis cluster client seeded with all masters,
// closed by t.Cleanup. It starts from go-redis' defaults; opts can adjust the
// options, typically to set short timeouts, retries and redirects for
// failure tests.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, f := range opts {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Flush runs FLUSHALL on every running master, so a test can reset the
// cluster's data without restarting it. Failure (for example on a paused
// master) fails the test.
func (c *Cluster) Flush() {
	c.tb.Helper()
	for _, m := range c.masters {
		if m.Running() {
			m.Flush()
		}
	}
}

// WaitHealthy waits until the cluster has converged, failing the test after
// 20 s: every running, unpaused master reports cluster_state:ok and sees every
// other such master as connected and not failing, and a fresh cluster client
// reaches each of them through a key in its slots. Slots of killed or paused
// masters are not checked, so it can also be used to wait for the survivors
// after a Kill. Call it after restarting or resuming a master.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(healthyTimeout)
	for {
		err := c.checkHealthy()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			var tails strings.Builder
			for _, m := range c.masters {
				fmt.Fprintf(&tails, "redis-server %s:\n%s", m.Addr(), m.logTail(0, 0))
			}
			t.Fatalf("redistest: cluster not healthy after %v: %v\n%s", healthyTimeout, err, tails.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) checkHealthy() error {
	var live []int
	liveAddrs := map[string]bool{}
	for i, m := range c.masters {
		if running, paused := m.state(); running && !paused {
			live = append(live, i)
			liveAddrs[m.Addr()] = true
		}
	}
	if len(live) == 0 {
		return errors.New("no running master")
	}
	for _, i := range live {
		m := c.masters[i]
		info, err := m.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", m.Addr(), err)
		}
		if text, _ := info.(string); !strings.Contains(text, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", m.Addr())
		}
		nodes, err := m.Do("CLUSTER", "NODES")
		if err != nil {
			return fmt.Errorf("CLUSTER NODES on %s: %w", m.Addr(), err)
		}
		text, _ := nodes.(string)
		for line := range strings.Lines(text) {
			// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			if !liveAddrs[addr] {
				continue
			}
			if strings.Contains(f[2], "fail") || f[7] != "connected" {
				return fmt.Errorf("%s sees %s as %s/%s", m.Addr(), addr, f[2], f[7])
			}
		}
	}
	return c.checkRouting(live)
}

// checkRouting reads each live master's probe key through a fresh cluster
// client, proving that a client can discover the topology and reach every
// live master's slots.
func (c *Cluster) checkRouting(live []int) error {
	byAddr := map[string]*Server{}
	seeds := make([]string, 0, len(live))
	for _, i := range live {
		byAddr[c.masters[i].Addr()] = c.masters[i]
		seeds = append(seeds, c.masters[i].Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    seeds,
		DialTimeout:              opTimeout,
		ReadTimeout:              opTimeout,
		WriteTimeout:             opTimeout,
		MaxRetries:               -1,
		MaxRedirects:             -1,
		DialerRetries:            1,
		PoolSize:                 1,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		NewClient: func(opt *redis.Options) *redis.Client {
			// Only ever talk to our own processes.
			addr := opt.Addr
			opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
				s := byAddr[addr]
				if s == nil {
					return fmt.Errorf("redistest: cluster client redirected to %s, which is not a live master", addr)
				}
				info, err := cn.Info(ctx, "server").Result()
				if err != nil {
					return err
				}
				return checkPID(addr, info, s.PID())
			}
			return redis.NewClient(opt)
		},
	})
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*opTimeout)
	defer cancel()
	for _, i := range live {
		if err := cc.Get(ctx, c.probes[i]).Err(); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("GET %s (slot %d, master %s) through a cluster client: %w",
				c.probes[i], keySlot(c.probes[i]), c.masters[i].Addr(), err)
		}
	}
	return nil
}

// keySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key, or of its first non-empty {hash tag}, modulo 16384.
func keySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key) % clusterSlots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster uses for key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
