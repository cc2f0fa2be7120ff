package hybrid_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// Reserve and Wait in Async mode go through the share protocol, as AllowN
// does: a node reserves only in the share it holds, and asks the fleet for
// room before it makes a request wait in a share smaller than the limit.
// Before, a node reserved in whatever share its entry last had: one that
// had given its grant back went on reserving in it (4 nodes: 1.65 times the
// limit over 3 s; 8 nodes: 2.8 to 3 times), a sticky Wait client was paced
// at its node's even split (270 Waits at 90/s under PerSecond(100) on 4
// nodes: 9.9 s, where an exact limiter takes 3 s), and a key too small to
// split (Per(1, 2 s) over 8 nodes) refused every reservation with a
// RetryAfter of 12 s.

// waitLoop calls Wait on l for key until stop, recording when each returned.
func waitLoop(ctx context.Context, t *testing.T, l *hybrid.Limiter, key string, lim hybrid.Limit, mu *sync.Mutex, acted *[]time.Time) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := l.Wait(wctx, key, lim)
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded, "Wait fails only by the context")
			continue
		}
		mu.Lock()
		*acted = append(*acted, time.Now())
		mu.Unlock()
	}
}

// maxIn returns the most times in any window of w.
func maxIn(times []time.Time, w time.Duration) int {
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range times {
		for times[i].Sub(times[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// Every node of the fleet waits on one key at once, after one node has had
// it to itself (so the others gave their even splits back): the fleet acts
// no more often than the bound allows.
func TestAsyncWaitOnEveryNodeStaysWithinTheBound(t *testing.T) {
	for _, n := range []int{4, 8} {
		t.Run(string(rune('0'+n))+" nodes", func(t *testing.T) {
			srv := redistest.Start(t)
			nodes := unevenFleet(t, srv, n, hybrid.Config{})
			const rate = 100
			lim := hybrid.PerSecond(rate)
			start := time.Now()
			tl := burst(t, nodes[0], "w", []hybrid.Limit{lim}, rate) // node 0 holds the key; the others join and give theirs back
			require.Equal(t, rate, tl.admitted)
			acted := make([]time.Time, 0, 1000)
			for range rate {
				acted = append(acted, start)
			}
			var mu sync.Mutex
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for _, l := range nodes {
				for range 3 {
					wg.Add(1)
					go func() { defer wg.Done(); waitLoop(ctx, t, l, "w", lim, &mu, &acted) }()
				}
			}
			wg.Wait()
			w := 3 * time.Second
			bound := fleetsim.AsyncBound(rate, rate, hybrid.DefaultSyncInterval, 10*time.Millisecond, n, w)
			worst := maxIn(acted, w)
			t.Logf("%d nodes: %d acted in all, at most %d within %v (an exact limiter: %.0f, the bound %.0f)",
				n, len(acted), worst, w, fleetsim.Limit(rate, rate, w), bound)
			assert.LessOrEqual(t, float64(worst), bound, "the fleet acts within the bound")
		})
	}
}

// A sticky client that reserves at 90/s under PerSecond(100) on one node of
// four never has to wait: an exact limiter's bucket never runs dry, and the
// node gets the room from the fleet.
func TestAsyncStickyReservationsArePacedAtTheFleetsRate(t *testing.T) {
	srv := redistest.Start(t)
	nodes := unevenFleet(t, srv, 4, hybrid.Config{})
	lim := hybrid.PerSecond(100)
	var waited time.Duration
	refused, longest := 0, time.Duration(0)
	start := time.Now()
	for i := range 270 {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / 90)))
		r, err := nodes[0].Reserve(context.Background(), "sticky", lim)
		require.NoError(t, err)
		if !r.OK() {
			refused++
			continue
		}
		waited += r.Delay()
		longest = max(longest, r.Delay())
	}
	t.Logf("270 reservations at 90/s: %d refused, waits add up to %v, longest %v", refused, waited, longest)
	assert.Zero(t, refused, "an exact limiter makes every one")
	assert.LessOrEqual(t, waited, 500*time.Millisecond, "an exact limiter makes every one at once: the node holds the fleet's room, not its even split")
}

// A key too small to split among the nodes (one request per 2 s over 8
// nodes): the first reservation is made at once, and Wait gets its turn once
// the limit has room again.
func TestAsyncReserveOnAKeyTooSmallToSplit(t *testing.T) {
	srv := redistest.Start(t)
	nodes := unevenFleet(t, srv, 8, hybrid.Config{})
	lim := hybrid.Per(1, 2*time.Second)
	r, err := nodes[0].Reserve(context.Background(), "small", lim)
	require.NoError(t, err)
	require.True(t, r.OK(), "the first reservation is made: RetryAfter %v", r.RetryAfter)
	assert.Zero(t, r.Delay())
	r, err = nodes[0].Reserve(context.Background(), "small", lim)
	require.NoError(t, err)
	if r.OK() {
		assert.InDelta(t, 2*time.Second, r.Delay(), float64(200*time.Millisecond), "the next acts once the limit has room")
	} else {
		assert.LessOrEqual(t, r.RetryAfter, 2*time.Second+200*time.Millisecond, "refused until the limit has room, not longer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	began := time.Now()
	require.NoError(t, nodes[3].Wait(ctx, "small", lim), "Wait on another node gets its turn")
	t.Logf("the Wait on another node took %v", time.Since(began))
}
