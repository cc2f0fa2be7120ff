package hybridlimit_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// The failover suite: a fleet on a real Redis Sentinel setup (a master, a
// replica, three sentinels), each node with its own go-redis failover
// client, while the sentinels fail the master over: gracefully, or because
// it was killed. The promises are the chaos suite's (see chaos_test.go):
// no error, no decision waiting on Redis, admissions within the bound, the
// breaker closing afterwards, and every spend in Redis in the end, since a
// node's reports are cumulative and so re-apply on the new master whatever
// the old one acknowledged but never replicated.

const (
	// failoverAt is when the failover starts, into the run.
	failoverAt = 2 * time.Second
	// failoverHang bounds the run: the load runs until the failover is
	// over and the fleet has had its recovery time after it. The sentinels
	// take about 7 s to replace a killed master idle (they call it down
	// after 5 s), and 12 s more for each election a split vote spoils;
	// redistest's own waits only catch a stuck setup, after two minutes.
	failoverHang = 90 * time.Second
)

// failoverOpts are clientOpts for a failover client.
func failoverOpts(o *redis.FailoverOptions) {
	o.MaxRetries = -1
	o.DialTimeout = clientTimeout
	o.ReadTimeout = clientTimeout
	o.WriteTimeout = clientTimeout
	o.PoolTimeout = clientTimeout
}

func TestFailover(t *testing.T) {
	for _, sc := range []struct {
		name string
		kill bool
	}{
		{name: "graceful failover"},
		{name: "master killed", kill: true},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runFailover(t, sc.kill)
		})
	}
}

func runFailover(t *testing.T, kill bool) {
	const prefix = "failover:"
	sen := redistest.StartSentinel(t)
	nodes := startFleet(t, hybrid.Config{Prefix: prefix, Mode: hybrid.Async, SyncInterval: chaosInterval, Ledger: true,
		RedisTimeout: redisTimeout, BreakerOpenFor: 200 * time.Millisecond},
		func() redis.UniversalClient { return sen.Client(t, failoverOpts) })

	// The load runs on its own goroutine; the failover on the test's, since
	// causing it may fail the test.
	stalls := startStallMeter(t)
	start, stop, wait := driveInBackground(nodes, failoverHang)
	t.Cleanup(stop) // a failover that fails the test stops the load too
	time.Sleep(time.Until(start.Add(failoverAt)))
	old := sen.Master()
	if kill {
		killed := sen.KillMaster(t)
		t.Logf("the replica was promoted %v after the kill", time.Since(start)-failoverAt)
		sen.RestartAsReplica(t, killed)
	} else {
		sen.Failover(t)
	}
	over := time.Since(start)
	t.Logf("failover done %v after it began", over-failoverAt)
	require.NotSame(t, old, sen.Master(), "the sentinels promoted the replica")
	require.Less(t, over, failoverHang, "the failover ended within the run")
	// The fleet runs on for its recovery and a while of steady state after.
	time.Sleep(recovery + time.Second)
	stop()
	tl := wait(t)
	m := measure(nodes, start.Add(failoverAt), start.Add(over+recovery))

	// 1. No Allow returned an error.
	assert.NoError(t, tl.FirstError)

	// 2. Nobody waited on Redis.
	assertNoWait(t, nodes, hybrid.Async, stalls.Worst())

	// 3. Within the bound, over the run and from the failover's start to its
	// end. The old master may not have replicated its last writes (killed,
	// or, in SENTINEL FAILOVER, still taking writes until it is made a
	// replica, which replication then drops): one more burst may pass
	// again.
	extra := float64(chaosBurst)
	total := tl.Total()
	whole := m.bound(m.span) + extra
	assert.LessOrEqual(t, float64(total.Admitted), whole, "over the run")
	end := over.Truncate(tl.Bucket) + tl.Bucket
	during := tl.Admitted(failoverAt, end)
	bound := m.bound(end-failoverAt) + extra
	assert.LessOrEqual(t, float64(during), bound, "during the failover")
	degraded := total.Sources[hybrid.Degraded]
	if kill {
		assert.Positive(t, degraded, "the dead master degraded the fleet")
	}
	t.Logf("admitted %d of %d offered (bound %.0f); during the failover %d (bound %.0f); degraded decisions %d; slowest %v; stalls up to %v; measured %+v",
		total.Admitted, total.Offered, whole, during, bound, degraded, slowest(nodes), stalls.Worst(), m)

	// 4. The breaker closes.
	assertRecovers(t, nodes, 10*time.Second)

	// 5. Every node flushes, and no spend was lost, not even what the old
	// master acknowledged and never passed on.
	consumed := flushAndAudit(t, nodes, sen.Client(t, failoverOpts), prefix)
	requests := audited(t, nodes) // what the ledger must hold
	assert.GreaterOrEqual(t, consumed, requests, "the new master holds every request, those made around the failover included")
	assert.LessOrEqual(t, consumed, requests+1, "and none twice")
}
