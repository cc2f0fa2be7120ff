package hybridlimit_test

import (
	"context"
	"errors"
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
	"github.com/hybridlimit/hybridlimit/remote"
)

// What the chaos and failover suites share: a fleet of limiters that also
// counts every request on an audit key, a load driven on its own goroutine
// while the test causes a fault, and the checks every scenario ends with.

// node is a fleet node that also spends every request on the audit key, and
// keeps the slowest decision it made, when it made its first and last, and
// how its rounds went: what the bounds are derived from.
type node struct {
	l       *hybrid.Limiter
	slowest atomic.Int64
	// auditAdmitted and auditRefused count the audit decisions. The audit
	// key's limit is far above any run's traffic, so each refusal is one
	// of what the limit allows.
	auditAdmitted, auditRefused atomic.Int64
	first, last                 atomic.Int64 // Unix ns of the first and the last decision

	mu     sync.Mutex
	rounds []round // the successful rounds
}

// round is one successful reconciliation round of a node.
type round struct {
	began time.Time
	took  time.Duration
}

func (n *node) observeRound(info hybrid.RoundInfo) {
	if info.Err != nil {
		return
	}
	n.mu.Lock()
	n.rounds = append(n.rounds, round{began: time.Now().Add(-info.Duration), took: info.Duration})
	n.mu.Unlock()
}

func (n *node) AllowN(ctx context.Context, key string, lim hybrid.Limit, k int64) (hybrid.Decision, error) {
	var d hybrid.Decision
	for _, step := range []struct {
		key string
		lim hybrid.Limit
	}{{"audit", audit}, {key, lim}} {
		start := time.Now()
		n.first.CompareAndSwap(0, start.UnixNano())
		// A run stopped early cancels ctx: a decision in flight still
		// completes, as a caller's would.
		got, err := n.l.AllowN(context.WithoutCancel(ctx), step.key, step.lim, k)
		end := time.Now()
		n.last.Store(end.UnixNano())
		took := int64(end.Sub(start))
		for s := n.slowest.Load(); took > s && !n.slowest.CompareAndSwap(s, took); s = n.slowest.Load() {
		}
		if err != nil {
			return got, err
		}
		if step.key == "audit" {
			if got.Allowed {
				n.auditAdmitted.Add(1)
			} else {
				n.auditRefused.Add(1)
			}
		}
		d = got
	}
	return d, nil
}

// startFleet makes chaosNodes limiters configured as cfg, each with the
// client newClient returns and a node name of its own. They are closed when
// the test ends, if the test has not closed them (Close is idempotent).
func startFleet(t *testing.T, cfg hybrid.Config, newClient func() redis.UniversalClient) []*node {
	t.Helper()
	nodes := make([]*node, chaosNodes)
	if cfg.FleetSize == 0 {
		// A fleet deployed at once knows its size, as docs/accuracy.md
		// advises: no node divides by the part of it that has beaten yet.
		cfg.FleetSize = chaosNodes
	}
	for i := range nodes {
		c := cfg
		c.Redis, c.Node = newClient(), fmt.Sprintf("n%d", i)
		n := &node{}
		c.OnRound = n.observeRound
		l, err := hybrid.New(c)
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = l.Close(ctx)
		})
		n.l = l
		nodes[i] = n
	}
	return nodes
}

// measured is what the fleet's run took in fact, which a loaded machine
// stretches: the bounds are derived from it rather than from the settings.
type measured struct {
	span     time.Duration // from the first decision to the last
	interval time.Duration // the longest time between two successful rounds of a node, outages aside
	rtt      time.Duration // the longest successful round
}

// measure takes the run's measures, the rounds between from and to aside:
// the fault and the recovery after it, when spend is bounded by the
// degraded limits rather than by the interval between rounds.
func measure(nodes []*node, from, to time.Time) measured {
	var m measured
	first, last := int64(0), int64(0)
	for _, n := range nodes {
		if f := n.first.Load(); first == 0 || f < first {
			first = f
		}
		last = max(last, n.last.Load())
		n.mu.Lock()
		for i, r := range n.rounds {
			if r.began.Add(r.took).After(from) && r.began.Before(to) {
				continue
			}
			m.rtt = max(m.rtt, r.took)
			if i > 0 && !(n.rounds[i-1].began.Before(to) && r.began.After(from)) {
				m.interval = max(m.interval, r.began.Sub(n.rounds[i-1].began))
			}
		}
		n.mu.Unlock()
	}
	m.span = time.Duration(last - first)
	return m
}

// recovery is how long after a fault ends the fleet may take to find Redis
// again (probes every BreakerOpenFor, a cluster converging): its rounds are
// not the steady state the interval is measured in.
const recovery = 2 * time.Second

// bound is the documented bound (fleetsim.AsyncBound) over a window of w,
// with the interval and round trip the run measured where they exceed the
// settings: a starved scheduler stretches both, legitimately.
func (m measured) bound(w time.Duration) float64 {
	interval := max(chaosInterval, time.Duration(float64(m.interval)/(1+fleetsim.Jitter)))
	return fleetsim.AsyncBound(chaosRate, chaosBurst, interval, max(rtt, m.rtt), chaosNodes, w)
}

// driveInBackground offers the fleet twice the load's rate for runFor, or
// until stop is called, on its own goroutine, so that the test's goroutine
// is free to cause faults (which may fail the test). It returns when the
// load began, the stop, and a wait for its timeline.
func driveInBackground(nodes []*node, runFor time.Duration) (began time.Time, stop func(), wait func(t *testing.T) *fleetsim.Timeline) {
	deciders := make([]fleetsim.Decider, len(nodes))
	for i, n := range nodes {
		deciders[i] = n
	}
	type driven struct {
		tl  *fleetsim.Timeline
		err error
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan driven, 1)
	began = time.Now()
	go func() {
		tl, err := fleetsim.Drive(ctx, deciders, fleetsim.Run{Key: "load", Limit: load, Duration: runFor},
			fleetsim.Load{Rate: 2 * chaosRate})
		done <- driven{tl, err}
	}()
	return began, stop, func(t *testing.T) *fleetsim.Timeline {
		t.Helper()
		r := <-done
		stop()
		if !errors.Is(r.err, context.Canceled) { // Canceled: stopped, with the timeline so far
			require.NoError(t, r.err)
		}
		return r.tl
	}
}

// stallMeter measures how late this process's goroutines run once they
// are due: a goroutine sleeps a millisecond at a time and keeps the
// largest overshoot. A machine whose CPUs are busy with other work shows
// in it; a decision waiting on Redis does not, being no scheduler's doing.
type stallMeter struct {
	worst atomic.Int64
	stop  chan struct{}
	done  chan struct{}
}

// startStallMeter starts a stallMeter that runs until the test ends.
func startStallMeter(t *testing.T) *stallMeter {
	m := &stallMeter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		const tick = time.Millisecond
		for {
			due := time.Now().Add(tick)
			select {
			case <-m.stop:
				return
			case <-time.After(tick):
			}
			if late := int64(time.Since(due)); late > m.worst.Load() {
				m.worst.Store(late)
			}
		}
	}()
	t.Cleanup(func() {
		close(m.stop)
		<-m.done
	})
	return m
}

// Worst is the longest a due goroutine waited to run, so far.
func (m *stallMeter) Worst() time.Duration { return time.Duration(m.worst.Load()) }

// slowest is the slowest decision any node made.
func slowest(nodes []*node) time.Duration {
	var m int64
	for _, n := range nodes {
		m = max(m, n.slowest.Load())
	}
	return time.Duration(m)
}

// clientTimeout is every node's Redis client's dial, read, write and pool
// timeout: the longest a decision may wait on Redis, should the breaker's
// 50 ms timeout not cut it short.
const clientTimeout = 200 * time.Millisecond

// hang is the wall-clock bound on one decision: ten times the longest it
// may legitimately take (the client's timeout, plus the longest the
// scheduler was seen to hold a goroutine that was due, stalls): it only
// catches a decision hung on Redis, never a loaded machine's scheduling.
func hang(stalls time.Duration) time.Duration { return 10 * (clientTimeout + stalls) }

// assertNoWait checks that no decision waited on Redis: counted, not timed.
// In Async mode no decision calls Redis at all; in Sync mode none does while
// the breaker is open, and while it is half-open only as the probe. The wall
// clock only catches a hang: stalls is the longest scheduling stall the run
// measured.
func assertNoWait(t *testing.T, nodes []*node, mode hybrid.Mode, stalls time.Duration) {
	t.Helper()
	for i, n := range nodes {
		took := time.Duration(n.slowest.Load())
		assert.LessOrEqual(t, took, hang(stalls), "node %d: a decision hung for %v (stalls up to %v)", i, took, stalls)
		st := n.l.Stats()
		calls := st.DecisionCalls
		assert.Zero(t, calls.Open, "node %d: decisions called Redis while the breaker was open", i)
		if mode == hybrid.Async {
			assert.Zero(t, calls.Closed+calls.Probes, "node %d: an async decision called Redis", i)
		} else {
			assert.LessOrEqual(t, calls.Probes, st.BreakerCounts.Probes, "node %d: decisions called Redis while half-open beyond the probes", i)
		}
	}
}

// assertRecovers checks that every node leaves degraded mode with its
// breaker closed within the given time.
func assertRecovers(t *testing.T, nodes []*node, within time.Duration) {
	t.Helper()
	for i, n := range nodes {
		assert.Eventually(t, func() bool { return !n.l.Degraded() && n.l.Stats().Breaker.String() == "closed" },
			within, 20*time.Millisecond, "node %d recovers", i)
	}
}

// audited returns the audit decisions the fleet admitted, and checks the
// refusals: none in Sync mode, where a decision Redis cannot make in time
// falls back to the node's even split, far above the audit key's traffic.
// In Async mode a request beyond what its node holds waits for the fleet
// at most AskWait and is refused if the store has not answered by then: on
// a loaded machine, or while Redis is failing without being down, that
// refuses traffic the limit allows (docs/accuracy.md, "Known shortfalls").
// They are logged, not hidden.
func audited(t *testing.T, nodes []*node) (admitted int64) {
	t.Helper()
	refused := int64(0)
	for _, n := range nodes {
		admitted += n.auditAdmitted.Load()
		refused += n.auditRefused.Load()
	}
	if nodes[0].l.Mode() == hybrid.Sync {
		assert.Zero(t, refused, "every audit request admitted")
	}
	t.Logf("audit: %d admitted, %d refused", admitted, refused)
	return admitted
}

// flushAndAudit closes every node, which reports what it spent and has not
// reported, checks that none lost spend, and returns how much of the audit
// key Redis (read through client) holds as consumed.
func flushAndAudit(t *testing.T, nodes []*node, client redis.UniversalClient, prefix string) int64 {
	t.Helper()
	for i, n := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		assert.NoError(t, n.l.Close(ctx), "node %d flushes", i)
		cancel()
		assert.Zero(t, n.l.Stats().Reconcile.LostSpend, "node %d lost no spend", i)
	}
	st, err := remote.New(client, remote.Options{Prefix: prefix})
	require.NoError(t, err)
	if nodes[0].l.Mode() == hybrid.Async {
		// Async nodes decide the audit key alone, each in its share, and
		// send what they admitted to its ledger when they close.
		spent, err := st.AsyncLedger(context.Background(), "audit", audit)
		require.NoError(t, err)
		return spent
	}
	d, err := st.AllowN(context.Background(), "audit", audit, 0)
	require.NoError(t, err)
	return audit.Capacity() - d.Remaining
}
