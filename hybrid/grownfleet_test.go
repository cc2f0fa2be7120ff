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

// grownFleet starts a node on srv, has it decide the first request of
// clients per-client keys alone, and starts a second: the keys are pooled
// now, and the first node reports them. It returns both nodes.
func grownFleet(t *testing.T, srv *redistest.Server, clients int, lim hybrid.Limit) (first, second *hybrid.Limiter) {
	t.Helper()
	start := func(i int) *hybrid.Limiter {
		c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.ReadTimeout = time.Second })
		l, err := hybrid.New(hybrid.Config{Redis: c, Prefix: "grown:", Node: fmt.Sprint("n", i),
			SyncInterval: 20 * time.Millisecond, AskWait: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l
	}
	first = start(0)
	for i := range clients {
		d, err := first.Allow(context.Background(), fmt.Sprint("client-", i), lim)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	second = start(1)
	require.Eventually(t, func() bool { return first.Stats().Reconcile.Shares.Nodes == 2 }, 10*time.Second, time.Millisecond)
	return first, second
}

// freshRefused decides one fresh client's first request on l, every gap,
// n times, and returns how many were refused and how many of them under
// the fallback (the breaker open: a burst-1 key weighs more than a node's
// degraded share).
func freshRefused(t *testing.T, l *hybrid.Limiter, lim hybrid.Limit, n int, gap time.Duration) (refused, degraded int) {
	t.Helper()
	for i := range n {
		d, err := l.Allow(context.Background(), fmt.Sprintf("fresh-%d-%d", time.Now().UnixNano(), i), lim)
		require.NoError(t, err)
		if !d.Allowed {
			refused++
			if d.Source == hybrid.Degraded {
				degraded++
			}
		}
		time.Sleep(gap)
	}
	return refused, degraded
}

// The first node decided 3,000 per-client keys alone when the second
// starts. It reports them a few at a time, beside its own asks: it queued
// all 3,000 at once, sent them in calls of BatchSize that outlasted the
// breaker's timeout, sent the same calls again, for ever, and its breaker
// opened: fresh clients (their first request, which any exact limiter
// admits) were refused on it for 8-9 s, and it sent 218,000 ops. (Found
// in review.) A loaded machine may time a call out whatever the reports:
// the fallback then refuses burst-1 keys, which the test tells apart.
func TestAGrownFleetsFirstNodeReportsWithoutStallingItsOwnRequests(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.Per(2, 10*time.Second).WithBurst(1)
	const clients = 3000
	first, _ := grownFleet(t, srv, clients, lim)
	refused, degraded := freshRefused(t, first, lim, 20, 0)
	require.Eventually(t, func() bool {
		sh := first.Stats().Reconcile.Shares
		return sh.Outgrown == clients && sh.Contested >= clients // each report answered: its key's contest made
	}, 30*time.Second, 10*time.Millisecond, "every key the first node spent alone reported, and the reports answered")
	st := first.Stats()
	t.Logf("fresh clients refused on the first node while it reported: %d of 20 (%d under the fallback); breaker timeouts %d, ops the store answered %d",
		refused, degraded, st.BreakerCounts.Timeouts, st.Reconcile.KeysSent)
	assert.Equal(t, degraded, refused, "a fresh client refused with the breaker closed")
	assert.Less(t, st.Reconcile.KeysSent, uint64(2*clients), "each report answered about once")
}

// The same, with Redis paused for 400 ms while the first node reports.
// Paced by the clock alone, the reports it would have sent meanwhile piled
// up and went out at once when Redis answered again, the calls outlasted
// the breaker's timeout, and the breaker kept opening: 11-59 of 60 fresh
// clients refused over the next 3 s, 0.5-1.1 million ops. (Found in
// review.)
func TestAGrownFleetsReportsDoNotPileUpBehindAStall(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.Per(2, 10*time.Second).WithBurst(1)
	const clients = 3000
	first, _ := grownFleet(t, srv, clients, lim)
	srv.Pause()
	time.Sleep(400 * time.Millisecond)
	srv.Resume()
	require.Eventually(t, func() bool { return !first.Degraded() && first.Stats().Breaker.String() == "closed" },
		time.Minute, 10*time.Millisecond, "the breaker closes again") // a hang guard
	timeouts := first.Stats().BreakerCounts.Timeouts
	refused, degraded := freshRefused(t, first, lim, 30, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		sh := first.Stats().Reconcile.Shares
		return sh.Outgrown == clients && sh.Contested >= clients // each report answered: its key's contest made
	}, 30*time.Second, 10*time.Millisecond, "every key the first node spent alone reported, and the reports answered")
	st := first.Stats()
	t.Logf("after the stall: fresh clients refused %d of 30 (%d under the fallback); breaker timeouts %d, %d of them after it closed again; ops the store answered %d",
		refused, degraded, st.BreakerCounts.Timeouts, st.BreakerCounts.Timeouts-timeouts, st.Reconcile.KeysSent)
	assert.Equal(t, degraded, refused, "a fresh client refused with the breaker closed")
	assert.LessOrEqual(t, degraded, 10, "the breaker kept opening after the stall")
	assert.Less(t, st.Reconcile.KeysSent, uint64(2*clients), "each report answered about once")
}
