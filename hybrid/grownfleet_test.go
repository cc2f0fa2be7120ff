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
