package hybrid_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// A node that holds grants on 3,000 keys closes: it gives every grant back.
// It sent them in calls of BatchSize (2,000 ops), which Redis ran in more
// than the call's timeout, so each call was abandoned, counted a failure
// and sent again whole, for ever: the breaker opened, Close failed after
// its 10 s with every grant still held, and the other nodes waited for the
// leases to lapse. Any backlog of ops does the same (the ops owed after an
// outage, reports): a node's calls now shrink when one times out, and grow
// back as they answer within their timeout. RedisTimeout is 10 ms here so
// that a quiet machine's Redis outlasts it too.
func TestANodeWithThousandsOfGrantsGivesThemBackOnClose(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.Per(10, time.Second).WithBurst(10) // 5 a node: the 6th request asks for a grant
	start := func(i int) *hybrid.Limiter {
		c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.ReadTimeout = time.Second })
		l, err := hybrid.New(hybrid.Config{Redis: c, Prefix: "backlog:", Node: fmt.Sprint("n", i), FleetSize: 2,
			SyncInterval: 20 * time.Millisecond, RedisTimeout: 10 * time.Millisecond, AskWait: time.Second})
		require.NoError(t, err)
		return l
	}
	leaving, staying := start(0), start(1)
	t.Cleanup(func() { _ = staying.Close(context.Background()) })
	const keys, workers = 3000, 32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < keys; k += workers {
				for range 7 {
					_, _ = leaving.Allow(context.Background(), fmt.Sprint("client-", k), lim)
				}
			}
		}()
	}
	wg.Wait()
	held := leaving.Stats().Reconcile.Leases
	require.GreaterOrEqual(t, held, keys*9/10, "the node holds a grant on (nearly) every key before it closes")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	err := leaving.Close(ctx)
	st := leaving.Stats()
	t.Logf("closing with %d grants took %v; breaker timeouts %d, ops answered %d", held, time.Since(began).Round(time.Millisecond),
		st.BreakerCounts.Timeouts, st.Reconcile.KeysSent)
	assert.NoError(t, err, "every grant given back within Close's deadline")
}
