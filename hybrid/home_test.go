package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/faultproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// Demand with a home: a client pinned to one node (gRPC, Envoy, consistent
// hashing) whose requests come further apart than a few sync intervals.
// After its first request the node holds the whole key and decides every
// later one from memory, the refusals included; when the client moves, the
// node it moves to asks, the old home gives the key back, and the new node
// becomes its home. Before homes, a node gave an idle grant back after
// three intervals, so a request every 100 ms (five intervals) asked Redis
// every time: 24 to 28 of 30 decisions remote.
func TestAPinnedClientIsDecidedFromMemory(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lim    hybrid.Limit
		refill time.Duration // from spent to whole
		// movedHome: the node the client moves to becomes its home. Not
		// yet where that node's even split holds a request: it is served
		// by the key's pool, a round trip a request, while the contest
		// lasts (docs/accuracy.md's known shortfalls).
		movedHome bool
	}{
		{"pooled 1/s burst 1", hybrid.PerSecond(1), time.Second, true},
		{"split 10/s burst 3", hybrid.PerSecond(10).WithBurst(3), 300 * time.Millisecond, false},
		{"pooled 2/s fixed window", hybrid.PerSecond(2).WithAlgorithm(hybrid.FixedWindow), time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			nodes := shapeFleet(t, srv, 3, hybrid.Config{Prefix: "home:", SyncInterval: 20 * time.Millisecond})
			// The exact limiter: one node alone, deciding the same requests
			// at the same instants.
			exact, err := hybrid.New(hybrid.Config{Mode: hybrid.LocalOnly})
			require.NoError(t, err)
			t.Cleanup(func() { _ = exact.Close(context.Background()) })
			ctx := context.Background()
			type tally struct{ admitted, exact, remote, decided int }
			decide := func(l *hybrid.Limiter, tl *tally) {
				dec, err := l.Allow(ctx, "client", tc.lim)
				require.NoError(t, err)
				ex, err := exact.Allow(ctx, "client", tc.lim)
				require.NoError(t, err)
				tl.decided++
				if dec.Allowed {
					tl.admitted++
				}
				if ex.Allowed {
					tl.exact++
				}
				if dec.Source != hybrid.Local {
					tl.remote++
				}
			}
			drive := func(l *hybrid.Limiter, d time.Duration, tl *tally) {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
					decide(l, tl)
				}
			}

			var home tally
			drive(nodes[0], 3*time.Second, &home)
			t.Logf("%v on node 0, one request every 100 ms: %+v", tc.lim, home)
			// The key's first requests are served by its pool until the
			// node's rate shows the client's demand; then the node holds
			// the whole key.
			assert.LessOrEqual(t, home.remote, 5, "after the key's first few requests, decisions from memory")
			assert.InDelta(t, home.exact, home.admitted, 1, "what the exact limiter admits")

			// The client moves once the key has refilled: the new node's
			// first request asks, the old home gives the key back, and the
			// new node decides it from memory from then on.
			time.Sleep(tc.refill + 100*time.Millisecond)
			var moved tally
			drive(nodes[1], time.Second, &moved)
			t.Logf("then on node 1: %+v; node 0's protocol: %+v", moved, nodes[0].Stats().Reconcile.Shares)
			if tc.movedHome {
				assert.LessOrEqual(t, moved.remote, 5, "the new home decides from memory")
			}
			assert.InDelta(t, moved.exact, moved.admitted, 1, "what the exact limiter admits")
		})
	}
}

// A sparse client pinned to one node: its requests come further apart than
// a lease (1 s here). Its home holds while its requests come less than half
// a HomeLease apart, so every decision after its first is made from memory.
// Before homes outlived a lease, each of these requests asked Redis: 8 of 8
// remote with 1.2 s between them, 6 of 8 with 400 ms.
func TestASparseClientKeepsItsHome(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	nodes := shapeFleet(t, srv, 3, hybrid.Config{Prefix: "sparse:", SyncInterval: 20 * time.Millisecond})
	ctx := context.Background()
	remote := 0
	const requests = 5
	for i := range requests {
		if i > 0 {
			time.Sleep(1200 * time.Millisecond)
		}
		dec, err := nodes[0].Allow(ctx, "client", hybrid.PerSecond(1))
		require.NoError(t, err)
		assert.True(t, dec.Allowed, "request %d: a request a second apart is within 1/s", i)
		if dec.Source != hybrid.Local {
			remote++
		}
	}
	t.Logf("%d of %d decisions waited on Redis; node 0's protocol: %+v", remote, requests, nodes[0].Stats().Reconcile.Shares)
	assert.LessOrEqual(t, remote, 1, "only the key's first request asks Redis")
}

// A home on a node that stops beating (cut off from Redis: a crash looks
// the same to the others) is the fleet's again an active window later,
// long before its HomeLease ends: as any grant that lapses unreported, the
// pool has it back then, but for an even split held back until the node
// could have recovered (it may decide degraded in one). The client, moved
// to another node, is admitted after those (1 s and 0.42 s here), and the
// two nodes together never admit more than the limit allows. Without the
// fleet's departures, the home held for its whole HomeLease (20 s): the
// moved client was refused.
func TestAHomeOnANodeThatStopsBeatingIsTakenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr())
	lim := hybrid.PerSecond(1)
	cfg := hybrid.Config{Prefix: "gone:", SyncInterval: 20 * time.Millisecond, RedisTimeout: 200 * time.Millisecond,
		BreakerOpenFor: 200 * time.Millisecond}
	newNode := func(name, addr string) *hybrid.Limiter {
		c := cfg
		c.Node = name
		c.Redis = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
			ReadTimeout: 200 * time.Millisecond})
		l, err := hybrid.New(c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l
	}
	cut := newNode("cut", proxy.Addr())
	other := newNode("other", srv.Addr())
	third := newNode("third", srv.Addr())
	require.Eventually(t, func() bool {
		return cut.Stats().Reconcile.Nodes == 3 && other.Stats().Reconcile.Nodes == 3 && third.Stats().Reconcile.Nodes == 3
	}, 5*time.Second, 5*time.Millisecond)
	ctx := context.Background()

	// The client is at home on the node about to be cut off.
	for i := range 3 {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond)
		}
		dec, err := cut.Allow(ctx, "client", lim)
		require.NoError(t, err)
		require.True(t, dec.Allowed)
	}
	require.Equal(t, hybrid.Local, mustAllowSource(t, cut, lim), "the key is at home on the node (the request refused from memory)")

	proxy.ResetPeers(t)
	cutAt := time.Now()
	type admission struct {
		at   time.Duration
		node string
	}
	var admitted []admission
	firstOther := time.Duration(-1)
	for time.Since(cutAt) < 5*time.Second {
		for _, n := range []struct {
			name string
			l    *hybrid.Limiter
		}{{"cut", cut}, {"other", other}} {
			dec, err := n.l.Allow(ctx, "client", lim)
			require.NoError(t, err)
			if dec.Allowed {
				at := time.Since(cutAt)
				admitted = append(admitted, admission{at, n.name})
				if n.name == "other" && firstOther < 0 {
					firstOther = at
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("admitted after the cut: %+v; other's protocol: %+v", admitted, other.Stats().Reconcile.Shares)
	require.GreaterOrEqual(t, firstOther, time.Duration(0), "the node the client moved to never got the key")
	assert.Less(t, firstOther, 5*time.Second, "the key came back to the fleet about an active window and a recovery (1.4 s) after the cut, not at the home's lease end (20 s)")
	// The bound: at most the burst and a token a second between both
	// nodes, however the cut node decides (its grant, then the fallback).
	for i := range admitted {
		n := 0
		for _, b := range admitted[i:] {
			if b.at-admitted[i].at < time.Second {
				n++
			}
		}
		assert.LessOrEqual(t, n, 2, "admitted within a second from %v: %+v", admitted[i].at, admitted)
	}
}

// mustAllowSource returns the source of a decision on "client" at l.
func mustAllowSource(t *testing.T, l *hybrid.Limiter, lim hybrid.Limit) hybrid.Source {
	t.Helper()
	dec, err := l.Allow(context.Background(), "client", lim)
	require.NoError(t, err)
	return dec.Source
}
