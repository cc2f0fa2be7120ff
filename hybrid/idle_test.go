package hybrid_test

import (
	"context"
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
