package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/workload"
)

// What an idle Async node's heartbeats cost Redis: a beat that changes
// nothing in the registry sets no expiry and writes no stamp. Before, each
// beat ran 15 commands, its EVALSHA included (five PEXPIREs, a ZRANGE, a
// SET among them): 1,342 a second a node at a 10 ms interval; now 9. An idle
// node that holds keys in memory (decided in its even split) still hears
// a call on them: the second half bursts on one node and finds the idle
// nodes' room.
func TestAnIdleNodeCostsRedisLittle(t *testing.T) {
	srv := redistest.Start(t)
	const interval = 10 * time.Millisecond
	nodes := shapeFleet(t, srv, 3, hybrid.Config{Prefix: "idle:", SyncInterval: interval})
	ctx := context.Background()
	lim := hybrid.PerMinute(30) // an even split of 10 a node
	for _, l := range nodes {
		d, err := l.Allow(ctx, "k", lim) // within the node's split: no Redis
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	c := srv.Client(t)
	time.Sleep(5 * interval) // what the first requests brought settles
	before, err := workload.ReadRedis(ctx, c)
	require.NoError(t, err)
	const rest = 2 * time.Second
	time.Sleep(rest)
	after, err := workload.ReadRedis(ctx, c)
	require.NoError(t, err)
	cost := after.Sub(before)
	perNode := float64(cost.Calls) / rest.Seconds() / float64(len(nodes))
	beats := cost.ByCommand["evalsha"] // nothing but heartbeats runs a script while the fleet is idle
	require.Positive(t, beats, "the idle nodes beat")
	perBeat := float64(cost.Calls) / float64(beats)
	t.Logf("idle fleet of %d at a %v interval: %.0f commands a second a node, %.1f a heartbeat (%v)", len(nodes), interval, perNode, perBeat, cost.ByCommand)
	assert.Less(t, perBeat, 10.0, "commands a heartbeat, the script's call included (15 before)")

	// The idle nodes still answer a call: node 0 takes the whole limit.
	admitted := 0
	for range 30 {
		if d, err := nodes[0].Allow(ctx, "k", lim); err == nil && d.Allowed {
			admitted++
		}
	}
	// 27 left of the burst, and what refilled (half a request a second).
	assert.GreaterOrEqual(t, admitted, 27, "node 0 admits what the limit has left: the idle nodes gave their room back")
	assert.LessOrEqual(t, admitted, 30)
}

// A node at rest beats quietly: once its keys are given back (but for a
// home, a key only it uses, which it keeps for half a HomeLease unused)
// and nothing is decided, it beats every 200 ms instead of every interval
// (each beat is
// one script of about eight commands), so it costs Redis at most 50
// commands a second, and still often enough to stay in the fleet. Its
// first decision after the rest makes it beat every interval again. Before
// quiet beats an idle node cost about 500 commands a second at a 20 ms
// interval (9 a beat, 50 beats a second).
func TestANodeAtRestBeatsQuietly(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const n = 3
	nodes := shapeFleet(t, srv, n, hybrid.Config{Prefix: "idle:", SyncInterval: 20 * time.Millisecond})
	started := time.Now()
	ctx := context.Background()

	// Traffic that leaves contests behind: a shared key past every node's
	// even split, and per-client keys.
	hot := hybrid.PerSecond(100).WithBurst(20)
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		for i, l := range nodes {
			_, err := l.Allow(ctx, "hot", hot)
			require.NoError(t, err)
			_, err = l.Allow(ctx, fmt.Sprintf("client-%d", i), hybrid.PerSecond(1))
			require.NoError(t, err)
		}
	}
	// The rest: every grant given back or lapsed, but each node's home
	// (its client's key).
	require.Eventually(t, func() bool {
		for _, l := range nodes {
			if sh := l.Stats().Reconcile.Shares; sh.Granted > sh.Homes {
				return false
			}
		}
		return true
	}, 15*time.Second, 50*time.Millisecond, "the nodes never gave their keys back")
	for i, l := range nodes {
		t.Logf("node %d at rest holds %d homes", i, l.Stats().Reconcile.Shares.Homes)
	}
	// A node beats every interval for its first active window (1 s).
	time.Sleep(time.Until(started.Add(time.Second + 300*time.Millisecond)))

	admin := srv.Client(t)
	b0, err := workload.ReadRedis(ctx, admin)
	require.NoError(t, err)
	before, began := b0.Calls, time.Now()
	time.Sleep(2 * time.Second)
	b1, err := workload.ReadRedis(ctx, admin)
	require.NoError(t, err)
	perNode := float64(b1.Calls-before) / time.Since(began).Seconds() / n
	t.Logf("at rest: %.1f Redis commands a second a node (%v)", perNode, b1.Sub(b0).ByCommand)
	assert.LessOrEqual(t, perNode, 50.0, "an idle node's Redis commands a second")

	// Quiet beats keep every node in the fleet: each beat drops the nodes
	// silent for longer than the active window (1 s).
	fleet, err := admin.ZCard(ctx, "idle:{fleet}:nodes").Result()
	require.NoError(t, err)
	assert.EqualValues(t, n, fleet, "nodes the fleet still counts after the rest")

	// A node that decides again beats every interval again; one that does
	// not stays quiet (the same machine, the same stretch).
	rounds := func(l *hybrid.Limiter) uint64 { return l.Stats().Reconcile.Rounds }
	busy0, quiet0 := rounds(nodes[0]), rounds(nodes[1])
	for end := time.Now().Add(600 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		_, err := nodes[0].Allow(ctx, "client-0", hybrid.PerSecond(1000))
		require.NoError(t, err)
	}
	busy, quiet := rounds(nodes[0])-busy0, rounds(nodes[1])-quiet0
	t.Logf("rounds in 600 ms: %d deciding, %d at rest", busy, quiet)
	assert.Greater(t, busy, 2*quiet, "a node deciding beats every interval, one at rest every ten")
}
