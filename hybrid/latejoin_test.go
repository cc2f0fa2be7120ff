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
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// A fleet configured for two nodes (FleetSize 2) whose second node starts
// late. The first node's burst makes the key contested, and the contest
// holds an even split back for the second node until it joins. The second
// node, starting, reads the contest with the registry before it decides:
// it must still join (holding nothing), or the split is held back for
// ever and every later burst is admitted by half. Before it joined, a
// burst of 100 after a full refill got 46-53 admitted.
func TestALateJoinerReleasesWhatTheContestHeldForIt(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.PerSecond(100) // burst 100, refills in 1 s
	start := func(i int) *hybrid.Limiter {
		c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.ReadTimeout = time.Second })
		l, err := hybrid.New(hybrid.Config{Redis: c, Prefix: "late:", Node: fmt.Sprint("n", i), FleetSize: 2,
			SyncInterval: 20 * time.Millisecond, AskWait: 200 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l
	}
	burst := func(l *hybrid.Limiter) int {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.Allow(context.Background(), "client", lim)
				assert.NoError(t, err)
				if d.Allowed {
					admitted.Add(1)
				}
			}()
		}
		wg.Wait()
		return int(admitted.Load())
	}

	first := start(0)
	before := burst(first) // the second node is counted but absent: its split is held for it
	second := start(1)
	time.Sleep(1200 * time.Millisecond) // the key refills whole
	after := burst(first)
	t.Logf("a burst of 100 on the first node: %d admitted with the second node absent, %d after it started and the key refilled; the second node's protocol: %+v",
		before, after, second.Stats().Reconcile.Shares)
	assert.GreaterOrEqual(t, after, 95, "the whole burst, as an exact limiter admits it: the late node's split was released")
	assert.LessOrEqual(t, before+after, 200+2, "within the limit")
}
