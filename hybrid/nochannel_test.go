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

// A node that cannot hear the fleet's channel (a proxy without pub/sub,
// an ACL that denies SUBSCRIBE, a subscription being made again) beats
// every interval, at rest too, and reads calls from the registry in time:
// the registry is the truth, the channel the fast path. Here the two idle
// nodes cannot SUBSCRIBE (every script and PUBLISH still runs); node 0
// then wants the whole limit, which the idle nodes hold in their even
// splits and give back once they read the call. (Found in review: quiet
// nodes read it at their next quiet beat, up to 200 ms later, past the
// asker's AskWait of 40 ms, and 1-2 of 27 requests within the limit were
// refused in every run.)
func TestAnIdleNodeWithoutTheChannelAnswersACallInTime(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "nosub", "on", ">pw", "~*", "&*", "+@all", "-subscribe", "-psubscribe", "-ssubscribe").Err())

	const n = 3
	const interval = 20 * time.Millisecond
	nodes := make([]*hybrid.Limiter, n)
	for i := range nodes {
		c := hybrid.Config{Prefix: "nochan:", SyncInterval: interval, Node: fmt.Sprintf("n%d", i)}
		c.Redis = srv.Client(t, func(o *redis.Options) {
			o.MaxRetries = -1
			o.DialTimeout = 200 * time.Millisecond
			o.ReadTimeout = 200 * time.Millisecond
			if i > 0 { // the idle nodes: no pub/sub
				o.Username, o.Password = "nosub", "pw"
			}
		})
		l, err := hybrid.New(c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		nodes[i] = l
	}
	require.Eventually(t, func() bool {
		for _, l := range nodes {
			if l.Stats().Reconcile.Nodes < n {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond)

	lim := hybrid.PerMinute(30) // an even split of 10 a node, refilling one every 2 s
	for _, l := range nodes {
		d, err := l.Allow(ctx, "k", lim) // within the node's split: no Redis
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	// At rest: past the first active window (1 s), nothing decided since.
	time.Sleep(1500 * time.Millisecond)

	// Node 0 takes what the limit has left: 27 (and what refilled).
	// An exact limiter admits the first 27 of these at once.
	var refusedAt []int
	start := time.Now()
	for i := range 27 {
		if d, err := nodes[0].Allow(ctx, "k", lim); err != nil || !d.Allowed {
			refusedAt = append(refusedAt, i)
		}
	}
	t.Logf("node 0: 27 requests within the limit in %v, refused: %v (AskTimeouts %d)", time.Since(start).Round(time.Millisecond), refusedAt, nodes[0].Stats().AskTimeouts)
	assert.Empty(t, refusedAt, "requests within the limit refused: the idle nodes hold the room and give it back when they read the call")
}
