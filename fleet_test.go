package hybridlimit_test

import (
	"context"
	"fmt"
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
// keeps the slowest decision it made.
type node struct {
	l       *hybrid.Limiter
	slowest atomic.Int64
}

func (n *node) AllowN(ctx context.Context, key string, lim hybrid.Limit, k int64) (hybrid.Decision, error) {
	var d hybrid.Decision
	for _, step := range []struct {
		key string
		lim hybrid.Limit
	}{{"audit", audit}, {key, lim}} {
		start := time.Now()
		got, err := n.l.AllowN(ctx, step.key, step.lim, k)
		took := int64(time.Since(start))
		for s := n.slowest.Load(); took > s && !n.slowest.CompareAndSwap(s, took); s = n.slowest.Load() {
		}
		if err != nil {
			return got, err
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
	for i := range nodes {
		c := cfg
		c.Redis, c.Node = newClient(), fmt.Sprintf("n%d", i)
		l, err := hybrid.New(c)
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = l.Close(ctx)
		})
		nodes[i] = &node{l: l}
	}
	return nodes
}

// driveInBackground offers the fleet twice the load's rate for runFor on
// its own goroutine, so that the test's goroutine is free to cause faults
// (which may fail the test). It returns when the load began and a wait for
// its timeline.
func driveInBackground(nodes []*node, runFor time.Duration) (began time.Time, wait func(t *testing.T) *fleetsim.Timeline) {
	deciders := make([]fleetsim.Decider, len(nodes))
	for i, n := range nodes {
		deciders[i] = n
	}
	type driven struct {
		tl  *fleetsim.Timeline
		err error
	}
	done := make(chan driven, 1)
	began = time.Now()
	go func() {
		tl, err := fleetsim.Drive(context.Background(), deciders, fleetsim.Run{Key: "load", Limit: load, Duration: runFor},
			fleetsim.Load{Rate: 2 * chaosRate})
		done <- driven{tl, err}
	}()
	return began, func(t *testing.T) *fleetsim.Timeline {
		t.Helper()
		r := <-done
		require.NoError(t, r.err)
		return r.tl
	}
}

// slowest is the slowest decision any node made.
func slowest(nodes []*node) time.Duration {
	var m int64
	for _, n := range nodes {
		m = max(m, n.slowest.Load())
	}
	return time.Duration(m)
}

// assertNoWait checks that no node's decision took longer than hang.
func assertNoWait(t *testing.T, nodes []*node, hang time.Duration) {
	t.Helper()
	for i, n := range nodes {
		took := time.Duration(n.slowest.Load())
		assert.LessOrEqual(t, took, hang, "node %d: a decision took %v", i, took)
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
