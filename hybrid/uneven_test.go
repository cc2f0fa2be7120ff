package hybrid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// Traffic an exact limiter admits whole is admitted whole in Async mode,
// wherever it lands: on one node of several (a gRPC client, Envoy's one
// connection per host, a consistent-hash balancer), hopping between them,
// slow, or under several limits at once. Each case is a row of what used
// to be refused (before the share protocol asked the fleet for room: 75 of
// a sticky burst of 100 on one node of 4, 88 on one of 8, and so on), on a
// real Redis with several nodes at the default interval.
//
// A request beyond what its node holds waits for the fleet, at most
// AskWait; the tests give it a generous AskWait so that a loaded machine's
// slow round trips are not mistaken for refusals, and log the longest wait.

// askWait is the tests' AskWait: far above what a round trip takes, so that
// only a protocol that never makes room refuses.
const askWait = time.Second

// unevenFleet is n Async nodes on srv with the default interval.
func unevenFleet(t *testing.T, srv *redistest.Server, n int, cfg hybrid.Config) []*hybrid.Limiter {
	t.Helper()
	if cfg.AskWait == 0 {
		cfg.AskWait = askWait
	}
	if cfg.SyncInterval == 0 {
		cfg.SyncInterval = hybrid.DefaultSyncInterval
	}
	return shapeFleet(t, srv, n, cfg)
}

// tally counts decisions and the longest wait.
type tally struct {
	mu       sync.Mutex
	admitted int
	refused  int
	degraded int // of the refused, those decided under the fallback (the breaker open)
	longest  time.Duration
}

func (tl *tally) add(t *testing.T, d hybrid.Decision, err error, took time.Duration) {
	require.NoError(t, err)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	switch {
	case d.Allowed:
		tl.admitted++
	case d.Source == hybrid.Degraded:
		tl.refused++
		tl.degraded++
	default:
		tl.refused++
	}
	tl.longest = max(tl.longest, took)
}

// noneRefused asserts that the protocol refused none of what tl counted.
// A call to Redis that outlasts RedisTimeout (50 ms: a loaded machine)
// counts against the breaker, and three in a row open it: the nodes then
// decide under the conservative fallback, which refuses what is beyond a
// node's even split, by design (docs/accuracy.md). Those refusals are
// logged, and must coincide with the breakers' timeouts; any other is the
// protocol's.
func (tl *tally) noneRefused(t *testing.T, nodes []*hybrid.Limiter, msgAndArgs ...any) {
	t.Helper()
	timeouts := uint64(0)
	for _, l := range nodes {
		timeouts += l.Stats().BreakerCounts.Timeouts
	}
	t.Logf("%d admitted, %d refused (%d of them under the fallback, breaker timeouts %d), longest wait %v",
		tl.admitted, tl.refused, tl.degraded, timeouts, tl.longest)
	assert.Zero(t, tl.refused-tl.degraded, msgAndArgs...)
	if tl.degraded > 0 {
		assert.Positive(t, timeouts, "refused under the fallback with no call timed out")
	}
}

// burst sends n requests at once (one goroutine each) to l.
func burst(t *testing.T, l *hybrid.Limiter, key string, lims []hybrid.Limit, n int) *tally {
	tl := &tally{}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			for _, lim := range lims {
				d, err := l.Allow(context.Background(), key, lim)
				tl.add(t, d, err, time.Since(start))
			}
		}()
	}
	wg.Wait()
	return tl
}

// paced sends one request every every, for dur, to the node pick says.
func paced(t *testing.T, nodes []*hybrid.Limiter, pick func(i int, since time.Duration) int, key string, lims []hybrid.Limit,
	every, dur time.Duration) *tally {
	tl := &tally{}
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * every)
		if at.Sub(start) >= dur {
			break
		}
		time.Sleep(time.Until(at))
		l := nodes[pick(i, at.Sub(start))]
		for _, lim := range lims {
			t0 := time.Now()
			d, err := l.Allow(context.Background(), key, lim)
			tl.add(t, d, err, time.Since(t0))
		}
	}
	return tl
}

func TestUnevenStickyBurst(t *testing.T) {
	for _, n := range []int{4, 8} {
		t.Run(string(rune('0'+n))+" nodes", func(t *testing.T) {
			srv := redistest.Start(t)
			nodes := unevenFleet(t, srv, n, hybrid.Config{})
			lim := hybrid.PerSecond(100)
			for round := range 3 {
				if round > 0 {
					time.Sleep(2 * time.Second) // the exact limiter is full again
				}
				tl := burst(t, nodes[0], "sticky", []hybrid.Limit{lim}, 100)
				t.Logf("round %d: %d admitted, %d refused, longest wait %v", round, tl.admitted, tl.refused, tl.longest)
				assert.Equal(t, 100, tl.admitted, "round %d: an exact limiter admits the whole burst", round)
			}
		})
	}
}

func TestUnevenBurstThenRefill(t *testing.T) {
	srv := redistest.Start(t)
	nodes := unevenFleet(t, srv, 2, hybrid.Config{})
	lim := hybrid.PerSecond(50).WithBurst(50)
	tl := burst(t, nodes[0], "b", []hybrid.Limit{lim}, 50)
	assert.Equal(t, 50, tl.admitted, "the whole burst of 50")
	time.Sleep(200 * time.Millisecond) // 10 refilled, for the whole fleet
	tl = burst(t, nodes[0], "b", []hybrid.Limit{lim}, 5)
	assert.Equal(t, 5, tl.admitted, "what refilled")
	time.Sleep(1200 * time.Millisecond) // full again
	tl = burst(t, nodes[0], "b", []hybrid.Limit{lim}, 50)
	assert.Equal(t, 50, tl.admitted, "full again after a second idle")
	t.Logf("longest wait %v", tl.longest)
}

func TestUnevenSlowClient(t *testing.T) {
	srv := redistest.Start(t)
	nodes := unevenFleet(t, srv, 4, hybrid.Config{})
	// Half the limit's rate, on one node whose even split refills at a
	// quarter of it.
	lim := hybrid.Per(10, time.Second)
	tl := paced(t, nodes, func(int, time.Duration) int { return 0 }, "slow", []hybrid.Limit{lim}, 200*time.Millisecond, 4*time.Second)
	tl.noneRefused(t, nodes)
}

func TestUnevenHopping(t *testing.T) {
	srv := redistest.Start(t)
	nodes := unevenFleet(t, srv, 8, hybrid.Config{})
	lim := hybrid.PerSecond(100)
	// 90 a second, moving to the next node every 200 ms.
	hop := func(_ int, since time.Duration) int { return int(since/(200*time.Millisecond)) % len(nodes) }
	tl := paced(t, nodes, hop, "hop", []hybrid.Limit{lim}, time.Second/90, 3*time.Second)
	tl.noneRefused(t, nodes)
}

func TestUnevenTwoLimits(t *testing.T) {
	srv := redistest.Start(t)
	nodes := unevenFleet(t, srv, 4, hybrid.Config{})
	lims := []hybrid.Limit{hybrid.PerSecond(10), hybrid.PerMinute(120)}
	tl := paced(t, nodes, func(int, time.Duration) int { return 0 }, "two", lims, time.Second/8, 3*time.Second)
	tl.noneRefused(t, nodes, "8 a second fits both limits")
}

func TestUnevenSteadyNearTheLimit(t *testing.T) {
	for _, n := range []int{4, 8} {
		t.Run(string(rune('0'+n))+" nodes", func(t *testing.T) {
			srv := redistest.Start(t)
			nodes := unevenFleet(t, srv, n, hybrid.Config{})
			lim := hybrid.PerSecond(100)
			tl := paced(t, nodes, func(int, time.Duration) int { return 0 }, "steady", []hybrid.Limit{lim}, time.Second/95, 3*time.Second)
			tl.noneRefused(t, nodes)
		})
	}
}

func TestUnevenSmallPerMinuteBurst(t *testing.T) {
	srv := redistest.Start(t)
	nodes := unevenFleet(t, srv, 2, hybrid.Config{})
	lim := hybrid.PerMinute(3)
	tl := burst(t, nodes[0], "endpoint", []hybrid.Limit{lim}, 3)
	assert.Equal(t, 3, tl.admitted, "a burst of 3 under 3 a minute")
	tl = burst(t, nodes[1], "endpoint", []hybrid.Limit{lim}, 1)
	assert.Equal(t, 0, tl.admitted, "and not a 4th, on the other node")
}

// A client over its limit everywhere costs no waiting: once a node knows the
// fleet has no room until some instant, it refuses alone until then.
func TestUnevenAbuserDoesNotWait(t *testing.T) {
	srv := redistest.Start(t)
	nodes := unevenFleet(t, srv, 4, hybrid.Config{})
	lim := hybrid.Per(10, time.Hour)
	for _, l := range nodes {
		burst(t, l, "abuser", []hybrid.Limit{lim}, 10)
	}
	asks := func() uint64 {
		var n uint64
		for _, l := range nodes {
			n += l.Stats().Reconcile.Shares.Asks
		}
		return n
	}
	before := asks()
	refused := 0
	for range 50 {
		for _, l := range nodes {
			d, err := l.Allow(context.Background(), "abuser", lim)
			require.NoError(t, err)
			if !d.Allowed {
				refused++
				assert.Positive(t, d.RetryAfter)
			}
		}
	}
	assert.Equal(t, 200, refused, "nothing refilled in the meantime: every request refused")
	t.Logf("asks for 200 refused requests: %d", asks()-before)
	assert.LessOrEqual(t, asks()-before, uint64(8), "each node asks about once, then knows")
}
