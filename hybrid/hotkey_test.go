package hybrid_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// A key over its limit on every node costs no waiting: each node refuses
// what its share cannot hold, alone, once the fleet knows nobody has room
// to spare, and admits the limit. Four nodes, one key offered twice its
// rate, each request to a node at random. Before, every node asked the
// others for room they all needed themselves, and each request beyond its
// node's share waited out the call (AskWait, 40 ms) to be refused then: 9%
// of decisions ran out their AskWait and a fifth of the refusals waited,
// p99 44 ms against Sync's 4 ms in make bench-keys (the same key, limit
// and traffic as here).
func TestAKeyOverItsLimitEverywhereIsRefusedWithoutWaiting(t *testing.T) {
	srv := redistest.Start(t)
	const nodes, rate, burst = 4, 1000, 100
	lim := hybrid.PerSecond(rate).WithBurst(burst)
	var ls []*hybrid.Limiter
	for range nodes {
		l, err := hybrid.New(hybrid.Config{Redis: srv.Client(t), Prefix: "hot:", SyncInterval: 20 * time.Millisecond,
			RedisTimeout: time.Second, FleetSize: nodes})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		ls = append(ls, l)
	}
	const warm, run = time.Second, 3 * time.Second
	var (
		mu                                 sync.Mutex
		decided, admitted, refused, waited int
		wg                                 sync.WaitGroup
	)
	r := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for sent := 0; time.Since(start) < warm+run; {
		<-tick.C
		for due := int(time.Since(start).Seconds() * 2 * rate); sent < due; sent++ {
			l := ls[r.IntN(nodes)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.Allow(context.Background(), "k", lim)
				assert.NoError(t, err)
				if time.Since(start) < warm {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				decided++
				switch {
				case d.Allowed:
					admitted++
				case d.Source == hybrid.Remote: // refused after asking the fleet and waiting for its answer
					refused++
					waited++
				default:
					refused++
				}
			}()
		}
	}
	wg.Wait()
	var timeouts uint64
	for _, l := range ls {
		timeouts += l.Stats().AskTimeouts
	}
	t.Logf("%d decided, %d admitted, %d refused (%d after waiting on the fleet), %d ran out their AskWait",
		decided, admitted, refused, waited, timeouts)
	require.Positive(t, refused, "offered twice the limit, some must be refused")
	// Before: 8-13% of decisions waited out their AskWait (3 runs, with
	// and without the race detector); after: 0.05-1.4% on a quiet machine,
	// 0.9-7% beside stress-ng --cpu 2, where the holders' answers come late.
	// The figure depends on the machine's speed: held by make pressure
	// (target), logged in make test. The rule itself is held on a manual
	// clock and against the script (TestAnOpSaysWhichCallItAnswersWhenItsNodeIsShortOfRoom,
	// TestShareScriptsConformOnACallEveryHolderAnswered).
	target(t, float64(timeouts) <= 0.04*float64(decided), "%d of %d decisions waited out AskWait for room nobody had (at most 4%%)", timeouts, decided)
	// The other side: the fleet admits the limit (the measured part: its
	// rate over the run, give or take the burst).
	assert.GreaterOrEqual(t, float64(admitted), 0.9*rate*run.Seconds(), "the fleet admits its limit")
	assert.LessOrEqual(t, float64(admitted), rate*run.Seconds()+burst, "and no more")
}
