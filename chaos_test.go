package hybridlimit_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/faultproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// The chaos suite: whole fleets against private redis-server processes (and
// a real Cluster), with faults caused for real: processes killed, stopped,
// restarted and flushed, and a TCP proxy adding latency or resetting
// connections. In every scenario:
//
//  1. no Allow returns an error;
//  2. no decision waits on Redis: counted, not timed (see assertNoWait), as
//     a loaded machine cannot fake it; the wall clock only catches a hang;
//  3. what the fleet admits while degraded, and over the whole run, stays
//     within the documented bound of the global limit, derived from what
//     the run measured (its span, the longest interval between rounds, the
//     longest round), which a loaded machine stretches legitimately;
//  4. the breaker closes after Redis returns;
//  5. what was spent while Redis was unreachable is in Redis afterwards;
//  6. no goroutine leaks (goleak, in TestMain: main_test.go).

const (
	chaosNodes    = 3
	chaosRate     = 300
	chaosBurst    = 30
	chaosInterval = 10 * time.Millisecond
	redisTimeout  = 50 * time.Millisecond
	faultAt       = 2 * time.Second
	healAt        = 5 * time.Second
	runFor        = 7 * time.Second
	// rtt is a generous round trip for the bound, on an idle machine; a run
	// that measured longer rounds uses those.
	rtt = 10 * time.Millisecond
)

var (
	// load is the binding limit the fleet is offered twice of.
	load = hybrid.PerSecond(chaosRate).WithBurst(chaosBurst)
	// audit counts every request: a burst no run exhausts, refilling less
	// than a token per run, so what Redis holds is what was reported.
	audit = hybrid.Per(10_000, 120*time.Hour)
)

// env is what a scenario's faults act on.
type env struct {
	srv     *redistest.Server  // single node scenarios
	cluster *redistest.Cluster // cluster scenario
	victim  *redistest.Server  // the cluster master that is killed
	proxy   *faultproxy.Proxy  // between the nodes and srv, when used
	direct  redis.UniversalClient
	prefix  string
}

type scenario struct {
	name    string
	mode    hybrid.Mode
	cluster bool
	proxy   bool
	args    []string
	// degrades says whether the fault should degrade the fleet at all.
	degrades bool
	// wipes says whether the fault loses what Redis held (a kill, an empty
	// restart): then only the spend made after it is counted.
	wipes  bool
	inject func(t *testing.T, e *env)
	heal   func(t *testing.T, e *env)
}

var scenarios = []scenario{
	{name: "kill -9 under load", degrades: true, wipes: true,
		inject: func(_ *testing.T, e *env) { e.srv.Kill() },
		heal:   func(_ *testing.T, e *env) { e.srv.Restart() }},
	{name: "kill -9 under load, sync", mode: hybrid.Sync, degrades: true, wipes: true,
		inject: func(_ *testing.T, e *env) { e.srv.Kill() },
		heal:   func(_ *testing.T, e *env) { e.srv.Restart() }},
	{name: "SIGSTOP 3 s then SIGCONT", degrades: true,
		inject: func(_ *testing.T, e *env) { e.srv.Pause() },
		heal:   func(_ *testing.T, e *env) { e.srv.Resume() }},
	{name: "SIGSTOP 3 s then SIGCONT, sync", mode: hybrid.Sync, degrades: true,
		inject: func(_ *testing.T, e *env) { e.srv.Pause() },
		heal:   func(_ *testing.T, e *env) { e.srv.Resume() }},
	{name: "restart empty", wipes: true,
		inject: func(_ *testing.T, e *env) { e.srv.Restart() },
		heal:   func(*testing.T, *env) {}},
	{name: "200 ms of added latency", proxy: true, degrades: true,
		inject: func(t *testing.T, e *env) { e.proxy.Latency(t, 200*time.Millisecond) },
		heal:   func(_ *testing.T, e *env) { e.proxy.Clear() }},
	{name: "200 ms of added latency, sync", mode: hybrid.Sync, proxy: true, degrades: true,
		inject: func(t *testing.T, e *env) { e.proxy.Latency(t, 200*time.Millisecond) },
		heal:   func(_ *testing.T, e *env) { e.proxy.Clear() }},
	{name: "connection resets", proxy: true, degrades: true,
		inject: func(t *testing.T, e *env) { e.proxy.ResetPeers(t) },
		heal:   func(_ *testing.T, e *env) { e.proxy.Clear() }},
	{name: "SCRIPT FLUSH",
		inject: func(t *testing.T, e *env) {
			for range 3 {
				_, err := e.srv.Do("SCRIPT", "FLUSH")
				require.NoError(t, err)
				time.Sleep(300 * time.Millisecond)
			}
		},
		heal: func(*testing.T, *env) {}},
	{name: "maxmemory reached", degrades: true, args: []string{"--maxmemory-policy", "noeviction"},
		inject: func(t *testing.T, e *env) {
			_, err := e.srv.Do("CONFIG", "SET", "maxmemory", "1")
			require.NoError(t, err)
		},
		heal: func(t *testing.T, e *env) {
			_, err := e.srv.Do("CONFIG", "SET", "maxmemory", "0")
			require.NoError(t, err)
		}},
	{name: "a Cluster master killed", cluster: true, degrades: true, wipes: true,
		inject: func(_ *testing.T, e *env) { e.victim.Kill() },
		heal: func(t *testing.T, e *env) {
			e.victim.Restart()
			e.cluster.WaitHealthy(t)
		}},
}

func clientOpts(o *redis.Options) {
	o.MaxRetries = -1
	o.DialTimeout = clientTimeout
	o.ReadTimeout = clientTimeout
	o.WriteTimeout = clientTimeout
	o.PoolTimeout = clientTimeout
}

func clusterOpts(o *redis.ClusterOptions) {
	o.MaxRetries = -1
	o.MaxRedirects = 1
	o.DialTimeout = clientTimeout
	o.ReadTimeout = clientTimeout
	o.WriteTimeout = clientTimeout
	o.PoolTimeout = clientTimeout
}

func TestChaos(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runScenario(t, sc)
		})
	}
}

func runScenario(t *testing.T, sc scenario) {
	e := &env{prefix: "chaos:"}
	var nodeClient func() redis.UniversalClient
	switch {
	case sc.cluster:
		e.cluster = redistest.StartCluster(t, 3)
		e.direct = e.cluster.Client(t, clusterOpts)
		nodeClient = func() redis.UniversalClient { return e.cluster.Client(t, clusterOpts) }
		e.victim = e.cluster.MasterFor("chaos:tb:{load}")
	default:
		e.srv = redistest.Start(t, redistest.WithArgs(sc.args...))
		e.direct = e.srv.Client(t, clientOpts)
		addr := e.srv.Addr()
		if sc.proxy {
			e.proxy = faultproxy.Start(t, addr)
			addr = e.proxy.Addr()
		}
		nodeClient = func() redis.UniversalClient {
			o := &redis.Options{Addr: addr}
			clientOpts(o) // before NewClient: go-redis normalises options when it builds the client
			c := redis.NewClient(o)
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	}

	nodes := startFleet(t, hybrid.Config{Prefix: e.prefix, Mode: sc.mode, SyncInterval: chaosInterval, Ledger: true,
		RedisTimeout: redisTimeout, BreakerOpenFor: 200 * time.Millisecond}, nodeClient)
	stalls := startStallMeter(t)
	start, _, wait := driveInBackground(nodes, runFor)
	time.Sleep(time.Until(start.Add(faultAt)))
	sc.inject(t, e)
	injected := time.Since(start)
	time.Sleep(time.Until(start.Add(healAt)))
	sc.heal(t, e)
	healed := time.Since(start)
	tl := wait(t)
	m := measure(nodes, start.Add(injected), start.Add(healed+recovery))

	// 1. No Allow returned an error.
	assert.NoError(t, tl.FirstError)

	// 2. Nobody waited on Redis.
	assertNoWait(t, nodes, sc.mode, stalls.Worst())

	// 3. Within the bound, while degraded and over the run. A wiped Redis
	// forgot the spend before the fault: one more burst may pass again.
	// The windows are the ones the run took in fact: its decisions' span,
	// and the buckets from the injection to the heal, both of which a
	// starved scheduler may stretch.
	total := tl.Total()
	extra := 0.0
	if sc.wipes {
		extra = chaosBurst
	}
	whole := m.bound(max(m.span, runFor)) + extra
	assert.LessOrEqual(t, float64(total.Admitted), whole, "over the run")
	from, to := injected.Truncate(tl.Bucket), healed.Truncate(tl.Bucket)+tl.Bucket
	outage := m.bound(to-from) + extra
	during := tl.Admitted(from, to)
	assert.LessOrEqual(t, float64(during), outage, "during the fault")
	degraded := total.Sources[hybrid.Degraded]
	if sc.degrades {
		assert.Positive(t, degraded, "the fault degraded the fleet")
	}
	t.Logf("admitted %d of %d offered (bound %.0f); during the fault %d (bound %.0f); degraded decisions %d; slowest %v; stalls up to %v; measured %+v",
		total.Admitted, total.Offered, whole, during, outage, degraded, slowest(nodes), stalls.Worst(), m)

	// 4. The breaker closes after Redis returns.
	assertRecovers(t, nodes, 15*time.Second)

	// 5. The spend is in Redis: flush every node, then read the audit key.
	consumed := flushAndAudit(t, nodes, e.direct, e.prefix)
	requests := audited(t, nodes) // what the ledger must hold
	if sc.wipes {
		after := int64(0)
		for _, b := range tl.Fleet() {
			if b.Start >= healAt {
				after += int64(b.Offered)
			}
		}
		assert.GreaterOrEqual(t, consumed, after, "at least the spend after Redis came back")
		assert.LessOrEqual(t, consumed, requests)
		if sc.degrades {
			outageSpend := int64(tl.Admitted(faultAt+500*time.Millisecond, healAt-500*time.Millisecond))
			assert.Greater(t, consumed, after+outageSpend/2, "and what was spent while Redis was gone")
		}
	} else {
		// A call the breaker stopped waiting for may still have run in
		// Redis: a Sync decision is then also decided (and later reported)
		// in memory. At most once per timed-out call.
		timedOut := int64(0)
		for _, n := range nodes {
			timedOut += int64(n.l.Stats().BreakerCounts.Timeouts)
		}
		if sc.mode != hybrid.Sync {
			timedOut = 0
		}
		assert.GreaterOrEqual(t, consumed, requests, "Redis holds every request, those made during the fault included")
		assert.LessOrEqual(t, consumed, requests+timedOut+1, "and none twice (but for %d Sync calls that timed out)", timedOut)
	}
}
