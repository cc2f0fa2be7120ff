package hybrid_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/remote"
)

// The traffic shapes that took an Async fleet past its bound, lost spend, or
// refused compliant clients, each against a real Redis with several nodes.
// The figures in the comments are what each shape measured before the share
// protocol.

// shapeFleet makes n Async nodes on srv with cfg, closed when the test ends.
func shapeFleet(t *testing.T, srv *redistest.Server, n int, cfg hybrid.Config) []*hybrid.Limiter {
	t.Helper()
	nodes := make([]*hybrid.Limiter, n)
	for i := range nodes {
		c := cfg
		c.Redis = srv.Client(t, func(o *redis.Options) {
			o.MaxRetries = -1
			o.DialTimeout = 200 * time.Millisecond
			o.ReadTimeout = 200 * time.Millisecond
		})
		c.Node = fmt.Sprintf("n%d", i)
		if c.SyncInterval == 0 {
			c.SyncInterval = 10 * time.Millisecond
		}
		l, err := hybrid.New(c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		nodes[i] = l
	}
	// Every node has seen the whole fleet: each divides by n.
	require.Eventually(t, func() bool {
		for _, l := range nodes {
			if l.Stats().Reconcile.Nodes < n {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond)
	return nodes
}

func deciders(nodes []*hybrid.Limiter) []fleetsim.Decider {
	out := make([]fleetsim.Decider, len(nodes))
	for i, l := range nodes {
		out[i] = l
	}
	return out
}

// Weighted requests: requests of a whole burst, on every node at once. Before:
// 9,600 admitted in 5 s where an exact limiter admits 5,100 (bound 5,191);
// fixed window 2,400 where 600 is the most.
func TestShapeWeightedRequests(t *testing.T) {
	srv := redistest.Start(t)
	const rate, burst, n = 1000, 100, 100
	lim := hybrid.PerSecond(rate).WithBurst(burst)
	nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "w:"})
	run := 5 * time.Second
	tl, err := fleetsim.Drive(context.Background(), deciders(nodes), fleetsim.Run{Key: "heavy", Limit: lim, Duration: run, N: n},
		fleetsim.Load{Rate: 2 * rate / n})
	require.NoError(t, err)
	require.NoError(t, tl.FirstError)
	total := tl.Total().Admitted
	bound := fleetsim.AsyncBound(rate, burst, 10*time.Millisecond, 10*time.Millisecond, 4, run)
	worst, _ := tl.MaxWindow(time.Second)
	t.Logf("weight %d: admitted %d in %v (exact %v, bound %.0f); worst second %d; decisions by source %v", n, total, run, fleetsim.Limit(rate, burst, run), bound, worst, tl.Total().Sources)
	assert.LessOrEqual(t, float64(total), bound)
	assert.LessOrEqual(t, float64(worst), fleetsim.AsyncBound(rate, burst, 10*time.Millisecond, 10*time.Millisecond, 4, time.Second))
	// A request of the whole burst needs the whole fleet's room: the nodes
	// give their shares back to the pool, which serves it. It waits for
	// that (at most Config.AskWait), and passes at a useful rate.
	assert.GreaterOrEqual(t, total, 1700, "at least a third of what an exact limiter admits")

	win := hybrid.PerSecond(100).WithAlgorithm(hybrid.FixedWindow)
	tl, err = fleetsim.Drive(context.Background(), deciders(nodes), fleetsim.Run{Key: "heavy-window", Limit: win, Duration: run, N: 100},
		fleetsim.Load{Rate: 8})
	require.NoError(t, err)
	require.NoError(t, tl.FirstError)
	t.Logf("fixed window, weight 100: admitted %d in %v (at most 600)", tl.Total().Admitted, run)
	assert.LessOrEqual(t, tl.Total().Admitted, 600, "one request of 100 per window, and one window of slack")
}

// Shares that go stale: each node in turn has the key to itself, then every
// node bursts at once. Before: 1,676 in the worst second at 600/min with 4
// nodes, where the bound was 1,060 and an exact limiter admits 610.
func TestShapeStaleShares(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.PerMinute(600)
	nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "s:"})
	tl, err := fleetsim.Drive(context.Background(), deciders(nodes), fleetsim.Run{Key: "stale", Limit: lim, Duration: 6 * time.Second},
		fleetsim.Load{Rate: 80, Weight: func(i int, at time.Duration) float64 {
			if at < 2*time.Second { // each node alone for half a second
				if int(at/(500*time.Millisecond)) == i {
					return 1
				}
				return 0
			}
			return 1 // then all at once, each at the whole rate
		}})
	require.NoError(t, err)
	require.NoError(t, tl.FirstError)
	worst, at := tl.MaxWindow(time.Second)
	bound := fleetsim.AsyncBound(10, 600, 10*time.Millisecond, 10*time.Millisecond, 4, time.Second)
	t.Logf("worst second %d at %v (bound %.0f, exact 610); whole run %d of %.0f", worst, at, bound, tl.Total().Admitted, fleetsim.Limit(10, 600, 6*time.Second))
	assert.LessOrEqual(t, float64(worst), bound)
	assert.LessOrEqual(t, float64(tl.Total().Admitted), fleetsim.AsyncBound(10, 600, 10*time.Millisecond, 10*time.Millisecond, 4, 6*time.Second))
}

// Degraded mode divides by the fleet, not by the nodes last seen on the key.
// Before: node 0 drained a key alone, Redis died, the key's traffic spread
// over 4 nodes: 678 admitted in 3 s where the limit allows 400.
func TestShapeDegradedDividesByTheFleet(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.PerSecond(100)
	nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "d:", BreakerOpenFor: time.Minute})
	for range 300 { // node 0 alone drains it, and takes the whole key
		_, err := nodes[0].Allow(context.Background(), "drained", lim)
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
	}
	srv.Kill()
	for _, l := range nodes {
		require.Eventually(t, func() bool {
			_, _ = l.Allow(context.Background(), "probe", lim)
			return l.Degraded()
		}, 5*time.Second, 10*time.Millisecond)
	}
	tl, err := fleetsim.Drive(context.Background(), deciders(nodes), fleetsim.Run{Key: "drained", Limit: lim, Duration: 3 * time.Second},
		fleetsim.Load{Rate: 400})
	require.NoError(t, err)
	t.Logf("degraded, spread over 4 nodes for 3 s: admitted %d (at most 400)", tl.Total().Admitted)
	assert.LessOrEqual(t, tl.Total().Admitted, 400)
	assert.Equal(t, tl.Total().Offered, tl.Total().Sources[hybrid.Degraded], "every decision made degraded")
}

// Heavy requests while degraded: no node can admit a request heavier than
// its share of the limit without the fleet going over it, since every node
// could at the same time. Before: weight 50 on a 100/s fixed window, 4
// nodes, Redis dead: each node admitted one per window, 800 in 3 s where
// the limit allows 400; the token bucket the same into debt.
func TestShapeHeavyWhileDegraded(t *testing.T) {
	srv := redistest.Start(t)
	nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "hd:", BreakerOpenFor: time.Minute})
	srv.Kill()
	probe := hybrid.PerSecond(100)
	for _, l := range nodes {
		require.Eventually(t, func() bool {
			_, _ = l.Allow(context.Background(), "probe", probe)
			return l.Degraded()
		}, 5*time.Second, 10*time.Millisecond)
	}
	for _, lim := range []hybrid.Limit{
		hybrid.PerSecond(100).WithAlgorithm(hybrid.FixedWindow),
		hybrid.PerSecond(100).WithAlgorithm(hybrid.SlidingWindowCounter),
		hybrid.PerSecond(100),
	} {
		run := 3 * time.Second
		tl, err := fleetsim.Drive(context.Background(), deciders(nodes), fleetsim.Run{Key: "heavy-" + lim.Algorithm.String(), Limit: lim, Duration: run, N: 50},
			fleetsim.Load{Rate: 40})
		require.NoError(t, err)
		require.NoError(t, tl.FirstError)
		worst, _ := tl.MaxWindow(time.Second)
		t.Logf("%v, weight 50, degraded on 4 nodes: admitted %d in %v (at most %d), worst second %d", lim, tl.Total().Admitted, run, 400, worst)
		assert.LessOrEqual(t, tl.Total().Admitted, 400, "never over the limit while degraded")
		assert.LessOrEqual(t, worst, 200, "one second holds at most a window and its burst")
		assert.Zero(t, tl.Total().Admitted, "a request of 50 is heavier than a node's 25: refused")
		assert.Equal(t, tl.Total().Offered/50, tl.Total().Sources[hybrid.Degraded], "every decision made degraded")
	}
	var refused uint64
	for _, l := range nodes {
		refused += l.Stats().HeavyRefused
	}
	assert.Positive(t, refused, "counted")
}

// One key under three limits of one algorithm that differ in rate: each has
// its own state and its own ledger. Before: Redis counted 410 of 600
// admitted, and LostSpend said 0.
func TestShapeOneKeyManyLimits(t *testing.T) {
	srv := redistest.Start(t)
	nodes := shapeFleet(t, srv, 2, hybrid.Config{Prefix: "m:", Ledger: true})
	limits := []hybrid.Limit{hybrid.PerHour(100), hybrid.PerHour(200), hybrid.PerHour(300)}
	admitted := make([]int64, len(limits))
	for round := range 400 {
		l := nodes[round%2]
		for i, lim := range limits {
			d, err := l.Allow(context.Background(), "client", lim)
			require.NoError(t, err)
			if d.Allowed {
				admitted[i]++
			}
		}
	}
	for _, l := range nodes {
		require.NoError(t, l.Close(context.Background()))
		assert.Zero(t, l.Stats().Reconcile.LostSpend)
	}
	st, err := remote.New(srv.Client(t), remote.Options{Prefix: "m:"})
	require.NoError(t, err)
	for i, lim := range limits {
		spent, err := st.AsyncLedger(context.Background(), "client", lim)
		require.NoError(t, err)
		t.Logf("%v: admitted %d, ledger %d", lim, admitted[i], spent)
		assert.Equal(t, admitted[i], spent, "%v: every admission is in its own ledger", lim)
		assert.LessOrEqual(t, admitted[i], lim.Rate, "%v: within its own limit", lim)
	}
}

// MaxKeys is the engine's, and an evicted key never comes back full.
// Before: MaxKeys 256, a hot 100/s key on 4 nodes and key churn: 2,624 in 3 s
// where an exact limiter admits 400.
func TestShapeEvictedKeyNeverComesBackFull(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.PerSecond(100)
	nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "e:", MaxKeys: 256})
	ctx, cancel := context.WithCancel(context.Background())
	var churned atomic.Int64
	var wg sync.WaitGroup
	for i, l := range nodes { // churn: new keys push the hot one out
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ctx.Err() == nil; k++ {
				_, _ = l.Allow(ctx, fmt.Sprintf("churn-%d-%d", i, k), lim)
				churned.Add(1)
				if k%8 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	tl, err := fleetsim.Drive(context.Background(), deciders(nodes), fleetsim.Run{Key: "hot", Limit: lim, Duration: 3 * time.Second},
		fleetsim.Load{Rate: 400})
	cancel()
	wg.Wait()
	require.NoError(t, err)
	bound := fleetsim.AsyncBound(100, 100, 10*time.Millisecond, 10*time.Millisecond, 4, 3*time.Second)
	t.Logf("hot key under churn of %d keys: admitted %d (exact 400, bound %.0f)", churned.Load(), tl.Total().Admitted, bound)
	assert.LessOrEqual(t, float64(tl.Total().Admitted), bound)
	for _, l := range nodes {
		assert.LessOrEqual(t, l.Stats().Keys, 256+64, "MaxKeys holds, give or take a shard's first key")
	}
}

// Compliant traffic is never refused after an outage: spend counts at the
// time it was made. Before: 21–23 requests refused in the 4 s after Redis
// returned, at 20% of the limit spread evenly.
func TestShapeCompliantAfterAnOutage(t *testing.T) {
	for _, fault := range []string{"kill", "stop"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel() // each its own redis-server; 200 requests a second leave the machine idle
			srv := redistest.Start(t)
			lim := hybrid.PerSecond(1000)
			nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "c:", BreakerOpenFor: 200 * time.Millisecond})
			done := make(chan *fleetsim.Timeline, 1)
			go func() {
				tl, _ := fleetsim.Drive(context.Background(), deciders(nodes), fleetsim.Run{Key: "compliant", Limit: lim, Duration: 12 * time.Second},
					fleetsim.Load{Rate: 200})
				done <- tl
			}()
			time.Sleep(2 * time.Second)
			if fault == "kill" {
				srv.Kill()
			} else {
				srv.Pause()
			}
			time.Sleep(4 * time.Second)
			if fault == "kill" {
				srv.Restart()
			} else {
				srv.Resume()
			}
			tl := <-done
			require.NoError(t, tl.FirstError)
			total := tl.Total()
			t.Logf("offered %d at 20%% of the limit: admitted %d, degraded decisions %d", total.Offered, total.Admitted, total.Sources[hybrid.Degraded])
			assert.Equal(t, total.Offered, total.Admitted, "nothing refused: before, during or after the outage")
		})
	}
}

// Remaining is what this node will admit. Before: Remaining 10 while only 3
// were admitted, with 3 nodes.
func TestShapeRemainingIsTheNodes(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.PerHour(30)
	nodes := shapeFleet(t, srv, 3, hybrid.Config{Prefix: "r:"})
	for _, l := range nodes {
		d, err := l.AllowN(context.Background(), "told", lim, 0)
		require.NoError(t, err)
		announced := d.Remaining
		got := int64(0)
		for range announced {
			if d, _ := l.Allow(context.Background(), "told", lim); d.Allowed {
				got++
			}
		}
		assert.Equal(t, announced, got, "every request announced is admitted")
	}
}

// State deleted under the fleet: someone deletes the key's Redis state every
// 250 ms. Before: 962 admitted in Async and 995 in Sync, against 248, with
// nothing logged. Now each node restores what it knows, and says so; in
// Async the fleet admits no more than the limit.
func TestShapeStateDeletedUnderTheFleet(t *testing.T) {
	for _, mode := range []hybrid.Mode{hybrid.Async, hybrid.Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			lim := hybrid.PerHour(100) // nothing refills: every admission counts
			nodes := shapeFleet(t, srv, 3, hybrid.Config{Prefix: "x:", Mode: mode})
			c := srv.Client(t)
			ctx, cancel := context.WithCancel(context.Background())
			deleted := make(chan struct{})
			go func() {
				defer close(deleted)
				tick := time.NewTicker(250 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
						keys, _ := c.Keys(ctx, "x:*{victim}*").Result()
						if len(keys) > 0 {
							c.Del(ctx, keys...)
						}
					}
				}
			}()
			tl, err := fleetsim.Drive(context.Background(), deciders(nodes), fleetsim.Run{Key: "victim", Limit: lim, Duration: 3 * time.Second},
				fleetsim.Load{Rate: 300})
			cancel()
			<-deleted
			require.NoError(t, err)
			lost := uint64(0)
			for _, l := range nodes {
				lost += l.Stats().StateLost
			}
			bound := fleetsim.AsyncBound(0, 100, 10*time.Millisecond, 10*time.Millisecond, 3, 3*time.Second)
			if mode == hybrid.Async {
				// The fleet does not change and nothing refills: each
				// node's grant rebuilds the contest, what the others held
				// is taken as spent, and a contest made again by a node
				// that held none of the lost one starts with its pool
				// spent. Before that last rule, 132 to 200 were admitted.
				bound = fleetsim.Limit(0, 100, 3*time.Second) + 100*3/65536.0
			}
			t.Logf("%v: admitted %d with the state deleted every 250 ms (limit 100, bound %.0f); state found lost %d times", mode, tl.Total().Admitted, bound, lost)
			assert.LessOrEqual(t, float64(tl.Total().Admitted), bound)
			assert.Positive(t, lost, "the loss was noticed and counted")
		})
	}
}
