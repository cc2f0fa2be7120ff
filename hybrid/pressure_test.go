package hybrid_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
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
)

// Redis work that follows pressure, held to what users rely on: a cold key
// on one node still gets its whole limit; a flood of new keys on a node
// does not loosen a hot key it shares; memory stays bounded by
// configuration through an outage under a flood, and is given back after.

// shortTimeouts fits a client to an outage: no retries, short timeouts.
func shortTimeouts(o *redis.Options) {
	o.MaxRetries = -1
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = time.Second
	o.WriteTimeout = time.Second
}

// target holds the targets that depend on the machine's speed (a
// round's wall time, a lease renewed in time): asserted by make pressure
// (HYBRIDLIMIT_TARGETS=1, no race detector, the full outage), logged with
// the figure and whether it was met everywhere else. make test asserts
// the properties that hold on any machine. docs/benchmarks.md gives the
// figures measured.
func target(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("HYBRIDLIMIT_TARGETS") != "" {
		assert.True(t, ok, "target not met: %s", msg)
		return
	}
	verdict := "met"
	if !ok {
		verdict = "NOT MET"
	}
	t.Logf("target %s: %s", verdict, msg)
}

// floodRate is how many new random keys a second the flood tests send: the
// issue's 60,000 when the targets are held (make pressure), 15,000 in make
// test, where other packages' tests share the two cores and a flood as
// fast as the machine goes would starve their timing.
func floodRate() float64 {
	if os.Getenv("HYBRIDLIMIT_TARGETS") != "" {
		return 60_000
	}
	return 15_000
}

// floodKeys sends allow new random keys at rate a second, paced every
// millisecond on one goroutine, until ctx ends; a machine that cannot keep
// up sends what it can. It counts the keys sent, and those refused.
func floodKeys(ctx context.Context, t *testing.T, allow func(ctx context.Context, key string) (hybrid.Decision, error), rate float64, sent, refused *atomic.Int64) {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	buf := make([]byte, 0, 32)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	began, n := time.Now(), int64(0)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for owed := int64(time.Since(began).Seconds()*rate) - n; owed > 0 && ctx.Err() == nil; owed-- {
			buf = strconv.AppendUint(append(buf[:0], "key:"...), r.Uint64(), 36)
			d, err := allow(ctx, string(buf))
			if err != nil {
				t.Error(err)
				return
			}
			n++
			sent.Add(1)
			if !d.Allowed {
				refused.Add(1)
			}
		}
	}
}

// perUser is the per-key limit of these tests: 10/s burst 10, a per-user
// limit.
var perUser = hybrid.PerSecond(10).WithBurst(10)

// A cold key whose requests all land on one node of four: the node starts
// it in an even split (a quarter: 2.5 of the burst), is denied, claims the
// key, and once the fleet has acked the claim holds the whole limit. An
// exact limiter admits 10 + 10 = 20 in the first second and 110 over ten;
// one stuck at its quarter would admit 5 and 27.5.
func TestColdKeyOnOneNodeGetsTheWholeLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const interval = 20 * time.Millisecond
	nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "cold:", SyncInterval: interval})
	run := 10 * time.Second
	tl, err := fleetsim.Drive(context.Background(), deciders(nodes), fleetsim.Run{Key: "cold", Limit: perUser, Duration: run},
		fleetsim.Load{Rate: 100, Weight: func(i int, _ time.Duration) float64 { // ten times the limit, all on node 0
			if i == 0 {
				return 1
			}
			return 0
		}})
	require.NoError(t, err)
	require.NoError(t, tl.FirstError)
	var perSecond []int
	for s := range 10 {
		perSecond = append(perSecond, tl.Admitted(time.Duration(s)*time.Second, time.Duration(s+1)*time.Second))
	}
	total := tl.Total().Admitted
	exact := fleetsim.Limit(10, 10, run)
	t.Logf("one node of four, offered 100/s: admitted %d in %v (exact %.0f: %.1f%%); per second %v (exact 20, then 10; a quarter share: 5, then 2.5)",
		total, run, exact, 100*float64(total)/exact, perSecond)
	assert.Greater(t, perSecond[0], 5, "more than a quarter share could admit in the first second")
	assert.GreaterOrEqual(t, perSecond[1], 9, "the whole limit's rate from the second second")
	assert.GreaterOrEqual(t, float64(total), 0.8*exact, "over the run, far more than a quarter share's 25%%")
	assert.LessOrEqual(t, float64(total), fleetsim.AsyncBound(10, 10, interval, 10*time.Millisecond, 4, run), "and within the bound")
	target(t, float64(total) >= 0.95*exact, "a cold key on one node is admitted at least 95%% of what an exact limiter admits over %v: %d of %.0f (%.1f%%)",
		run, total, exact, 100*float64(total)/exact)
}

// A flood of new random keys on one node (random API keys, checked before
// authentication, are cheap to send), floodRate a second or as many as the
// machine reaches, while that node and another share a hot key offered
// twice its limit: the hot key stays within the bound over
// the run and over every second, and the flooding node's rounds, which
// carry the hot key, stay within twice the interval.
func TestFloodOfNewKeysLeavesAHotKeyAlone(t *testing.T) {
	srv := redistest.Start(t)
	const (
		interval    = 20 * time.Millisecond
		rate, burst = 1000, 100
	)
	hot := hybrid.PerSecond(rate).WithBurst(burst)
	var mu sync.Mutex
	var rounds []time.Duration
	var flooding atomic.Bool
	nodes := make([]*hybrid.Limiter, 2)
	for i := range nodes {
		cfg := hybrid.Config{Redis: srv.Client(t, shortTimeouts), Prefix: "flood:", SyncInterval: interval, Node: fmt.Sprintf("n%d", i),
			RedisTimeout: time.Second} // a loaded machine under the race detector: the breaker stays shut
		if i == 0 {
			cfg.OnRound = func(info hybrid.RoundInfo) {
				if flooding.Load() {
					mu.Lock()
					rounds = append(rounds, info.Duration)
					mu.Unlock()
				}
			}
		}
		l, err := hybrid.New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		nodes[i] = l
	}
	require.Eventually(t, func() bool { return nodes[0].Stats().Reconcile.Nodes == 2 && nodes[1].Stats().Reconcile.Nodes == 2 },
		5*time.Second, 5*time.Millisecond)

	ctx, stop := context.WithCancel(context.Background())
	var flood, refused atomic.Int64
	var wg sync.WaitGroup
	flooding.Store(true)
	wg.Go(func() {
		floodKeys(ctx, t, func(ctx context.Context, key string) (hybrid.Decision, error) {
			return nodes[0].Allow(ctx, key, perUser)
		},
			floodRate(), &flood, &refused)
	})
	run := 5 * time.Second
	start := time.Now()
	tl, err := fleetsim.Drive(context.Background(), deciders(nodes), fleetsim.Run{Key: "hot", Limit: hot, Duration: run},
		fleetsim.Load{Rate: 2 * rate})
	stop()
	wg.Wait()
	flooding.Store(false)
	took := time.Since(start)
	require.NoError(t, err)
	require.NoError(t, tl.FirstError)

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, rounds)
	slices.Sort(rounds)
	q := func(p float64) time.Duration { return rounds[min(int(p*float64(len(rounds))), len(rounds)-1)] }
	total := tl.Total().Admitted
	worst, at := tl.MaxWindow(time.Second)
	// The bound over the span the decisions took in fact: a loaded
	// machine's driver makes its last decisions after run has passed (the
	// timeline files them in its last bucket; took is when they ended).
	span := max(run, took)
	bound := fleetsim.AsyncBound(rate, burst, interval, 10*time.Millisecond, 2, span)
	bound1 := fleetsim.AsyncBound(rate, burst, interval, 10*time.Millisecond, 2, time.Second)
	st := nodes[0].Stats()
	t.Logf("flood: %d new keys in %v on node 0 (%.0f/s, %d refused), %d keys held, %d with unreported spend; hot key: admitted %d over %v (exact %.0f, bound %.0f), worst second %d at %v (bound %.0f)",
		flood.Load(), took.Round(time.Millisecond), float64(flood.Load())/took.Seconds(), refused.Load(), st.Keys, st.Reconcile.Pending, total, span, fleetsim.Limit(rate, burst, span), bound, worst, at, bound1)
	t.Logf("node 0's rounds while flooded: %d, p50 %v p90 %v p99 %v max %v (twice the interval: %v); decisions by source %v",
		len(rounds), q(0.5), q(0.9), q(0.99), rounds[len(rounds)-1], 2*interval, tl.Total().Sources)
	assert.LessOrEqual(t, float64(total), bound, "the hot key over the run")
	// Every second but the last against the bound over a second; the
	// last holds the decisions made after run too (took - run more).
	for _, w := range tl.Windows(time.Second) {
		b := bound1
		if w.Last {
			b = fleetsim.AsyncBound(rate, burst, interval, 10*time.Millisecond, 2, time.Second+max(took-run, 0))
		}
		assert.LessOrEqual(t, float64(w.Admitted), b, "the hot key over the second from %v", w.At)
	}
	assert.Greater(t, float64(flood.Load())/took.Seconds(), floodRate()/10, "a flood")
	assert.Less(t, rounds[len(rounds)-1], 30*time.Second, "no round hangs")
	target(t, rounds[len(rounds)-1] <= 2*interval, "node 0's rounds, which carry the hot key, stay within twice the interval (%v) under a flood of %.0f new keys/s: %d rounds in %v, p50 %v, p90 %v, max %v",
		2*interval, float64(flood.Load())/took.Seconds(), len(rounds), took.Round(time.Millisecond), q(0.5), q(0.9), rounds[len(rounds)-1])
}

// outageFor is how long Redis stays dead under the flood in
// TestMemoryThroughAnOutage: short in make test, a minute in make
// outage-memory (HYBRIDLIMIT_OUTAGE=60s).
func outageFor(t *testing.T) time.Duration {
	if v := os.Getenv("HYBRIDLIMIT_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "HYBRIDLIMIT_OUTAGE")
		return d
	}
	return 5 * time.Second
}

// liveHeap is the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A flood of random keys through an outage, with MaxKeys 10,000 and
// MaxPending 20,000 (make pressure floods as fast as the machine goes, for
// a minute). The budget is what hybrid.Config documents: about 215
// bytes a key held (MaxKeys), about 150 a key with unreported spend
// (MaxPending), over the heap of the idle limiter. Once Redis is back and
// the node drained and closed, the heap is back within twice what it was
// before the outage, and the spend dropped at a bound is counted. With the
// Ledger, every key's spend waits for Redis through the outage, so
// MaxPending is hit; without it (the default) keys decided alone have
// nothing to send, and nothing waits or is lost.
func TestMemoryThroughAnOutage(t *testing.T) {
	for _, ledger := range []bool{false, true} {
		t.Run(fmt.Sprintf("ledger=%v", ledger), func(t *testing.T) { memoryThroughAnOutage(t, ledger) })
	}
}

func memoryThroughAnOutage(t *testing.T, ledger bool) {
	srv := redistest.Start(t)
	const (
		maxKeys, maxPending = 10_000, 20_000
		perKey, perPending  = 215, 150
	)
	outage := outageFor(t)
	l, err := hybrid.New(hybrid.Config{Redis: srv.Client(t, shortTimeouts), Prefix: "mem:", MaxKeys: maxKeys, MaxPending: maxPending,
		BreakerOpenFor: 200 * time.Millisecond, RedisTimeout: time.Second, Ledger: ledger})
	require.NoError(t, err)

	// make test floods at floodRate; make pressure as fast as two
	// goroutines go.
	var flood, refused atomic.Int64
	floodFor := func(d time.Duration) {
		ctx, stop := context.WithTimeout(context.Background(), d)
		defer stop()
		allow := func(ctx context.Context, key string) (hybrid.Decision, error) { return l.Allow(ctx, key, perUser) }
		if os.Getenv("HYBRIDLIMIT_TARGETS") == "" {
			floodKeys(ctx, t, allow, floodRate(), &flood, &refused)
			return
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { floodKeys(ctx, t, allow, 1e9, &flood, &refused) })
		}
		wg.Wait()
	}

	idle := liveHeap()
	budget := idle + maxKeys*perKey + maxPending*perPending
	floodFor(2 * time.Second) // Redis up: the node holds MaxKeys keys
	before := liveHeap()
	up := l.Stats()
	upFlood, upRefused := flood.Load(), refused.Load()

	srv.Kill()
	done := make(chan struct{})
	go func() {
		defer close(done)
		floodFor(outage)
	}()
	peak, samples := uint64(0), 0
	tick := time.NewTicker(time.Second)
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			peak = max(peak, liveHeap())
			samples++
		}
	}
	tick.Stop()
	peak = max(peak, liveHeap())
	degraded := l.Degraded()
	mid := l.Stats()

	srv.Restart()
	require.Eventually(t, func() bool {
		_, _ = l.Allow(context.Background(), "probe", perUser)
		return !l.Degraded()
	}, 30*time.Second, 50*time.Millisecond, "the node finds Redis again")
	drainStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	closeErr := l.Close(ctx)
	drained := time.Since(drainStart)
	end := l.Stats()
	after := liveHeap()
	runtime.KeepAlive(l) // its buffers count: they must have been released

	mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	t.Logf("Redis up for 2 s: %d new keys (%d refused), lost %d; then an outage of %v: %d more (%d refused), degraded at its end: %v",
		upFlood, upRefused, up.Reconcile.LostSpend, outage, flood.Load()-upFlood, refused.Load()-upRefused, degraded)
	t.Logf("live heap: idle %s, %s before the outage, peak %s during it (%d samples), %s after the drain (%v) and Close; budget %s (idle + %d keys × %d B + %d pending × %d B)",
		mib(idle), mib(before), mib(peak), samples, mib(after), drained.Round(time.Millisecond), mib(budget), maxKeys, perKey, maxPending, perPending)
	t.Logf("end of the outage: %d keys held, %d pending, lost %d; after Close: lost %d (%v)",
		mid.Keys, mid.Reconcile.Pending, mid.Reconcile.LostSpend, end.Reconcile.LostSpend, closeErr)

	assert.True(t, degraded, "the flood ran degraded")
	assert.LessOrEqual(t, after, 2*before, "after the drain, Close and a GC, at most twice the heap before the outage")
	assert.LessOrEqual(t, mid.Keys, maxKeys+maxKeys/100, "MaxKeys holds (give or take a few: local.Config.MaxKeys)")
	assert.LessOrEqual(t, mid.Reconcile.Pending, maxPending, "MaxPending holds")
	// Far more random keys than MaxPending were spent on while Redis was
	// out of reach: the bound was hit, and what it dropped is counted.
	assert.Greater(t, flood.Load()-upFlood, int64(maxPending))
	if ledger {
		assert.Positive(t, end.Reconcile.LostSpend, "spend dropped at MaxPending is counted")
		assert.LessOrEqual(t, end.Reconcile.LostSpend, uint64(flood.Load()-refused.Load()), "no more lost than was admitted")
	} else {
		assert.Zero(t, mid.Reconcile.Pending, "without a ledger, keys decided alone wait for nothing")
		assert.Zero(t, end.Reconcile.LostSpend, "and nothing is lost")
		assert.NoError(t, closeErr)
	}
	target(t, peak <= budget, "the heap through a %v outage under a flood stays within the documented budget: peak %s, budget %s", outage, mib(peak), mib(budget))
}
