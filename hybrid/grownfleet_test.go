package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// A node alone decides per-client keys of burst 1 in the whole limit, in
// memory. A second node starts: each key is pooled now (one request weighs
// more than half of it), and the first op on it makes its contest. When
// the new node asked first, its contest's pool started full while the
// first node had spent the key: a client that had used its one request got
// a second within the refill time. The first node now reports, when it
// hears the fleet grow, every such key it has spent, so the contest starts
// as spent whoever asks first.
func TestAGrownFleetsNewNodeFindsWhatTheFirstSpentAlone(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.Per(2, 10*time.Second).WithBurst(1) // one request, then one every 5 s
	start := func(i int) *hybrid.Limiter {
		c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.ReadTimeout = time.Second })
		l, err := hybrid.New(hybrid.Config{Redis: c, Prefix: "grown:", Node: fmt.Sprint("n", i),
			SyncInterval: 20 * time.Millisecond, AskWait: 200 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l
	}
	ctx := context.Background()
	first := start(0)
	const clients = 20
	for i := range clients {
		d, err := first.Allow(ctx, fmt.Sprint("client-", i), lim)
		require.NoError(t, err)
		require.True(t, d.Allowed, "the first node alone: client %d's first request", i)
	}
	second := start(1)
	// The new node waits for its heartbeats before it decides, and the
	// first hears its join on the fleet's channel meanwhile, and reports at
	// once (on a quiet machine, before the new node's first decision; here
	// it waits for the reports, so that a loaded machine cannot reorder
	// them: what a report does is the question, not how soon it comes).
	require.Eventually(t, func() bool {
		st := first.Stats().Reconcile.Shares
		return st.Outgrown == clients && st.Contested == clients // reported, and answered: each key's contest is made
	}, 10*time.Second, 5*time.Millisecond, "the first node reports the keys it spent alone")
	admitted := 0
	for i := range clients {
		d, err := second.Allow(ctx, fmt.Sprint("client-", i), lim)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	t.Logf("the second node admitted %d of %d clients' second requests within their refill time; the first node reported %d keys",
		admitted, clients, first.Stats().Reconcile.Shares.Outgrown)
	assert.Zero(t, admitted, "a client's second request within 5 s of its first, on the new node")
	assert.Equal(t, uint64(clients), first.Stats().Reconcile.Shares.Outgrown, "the first node reports every key it spent alone")
}

// The first node decided 3,000 per-client keys alone when the second
// starts. It reports them a few at a time, beside its own asks: it queued
// all 3,000 at once, sent them in calls of BatchSize that outlasted the
// breaker's timeout, sent the same calls again, for ever, and its breaker
// opened: fresh clients (their first request, which any exact limiter
// admits) were refused on it for 8-9 s. (Found in review.)
func TestAGrownFleetsFirstNodeReportsWithoutStallingItsOwnRequests(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.Per(2, 10*time.Second).WithBurst(1)
	start := func(i int) *hybrid.Limiter {
		c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.ReadTimeout = time.Second })
		l, err := hybrid.New(hybrid.Config{Redis: c, Prefix: "grown:", Node: fmt.Sprint("n", i),
			SyncInterval: 20 * time.Millisecond, AskWait: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l
	}
	ctx := context.Background()
	first := start(0)
	const clients = 3000
	for i := range clients {
		d, err := first.Allow(ctx, fmt.Sprint("client-", i), lim)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	start(1)
	require.Eventually(t, func() bool { return first.Stats().Reconcile.Shares.Nodes == 2 }, 10*time.Second, time.Millisecond)
	refused := 0
	for i := range 20 {
		if d, err := first.Allow(ctx, fmt.Sprint("fresh-", i), lim); err != nil || !d.Allowed {
			refused++
		}
	}
	require.Eventually(t, func() bool { return first.Stats().Reconcile.Shares.Outgrown == clients }, 30*time.Second, 10*time.Millisecond,
		"every key the first node spent alone reported")
	st := first.Stats()
	t.Logf("fresh clients refused on the first node while it reported: %d of 20; breaker timeouts %d, ops %d, degraded now %v",
		refused, st.BreakerCounts.Timeouts, st.Reconcile.Shares.Ops, st.Degraded)
	assert.Zero(t, refused, "fresh clients' first requests on the first node")
	assert.Less(t, st.Reconcile.Shares.Ops, uint64(2*clients), "each report sent about once")
}
