package hybrid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// reserveBurst makes n reservations at once (one goroutine each) on l, and
// returns when each acts (its time plus its delay) and how many were
// refused.
func reserveBurst(t *testing.T, l *hybrid.Limiter, key string, lim hybrid.Limit, n int) (acts []time.Time, refused int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := l.Reserve(context.Background(), key, lim)
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			if !r.OK() {
				refused++
				return
			}
			acts = append(acts, time.Now().Add(r.Delay()))
		}()
	}
	wg.Wait()
	return acts, refused
}

// A sticky burst of reservations on one node of several is made whole and
// at once, as an exact limiter makes it, and as AllowN admits it. Before,
// Reserve asked the fleet once: the first answer (the store calls the other
// nodes' even splits back) let the waiters decide again, and a reservation
// still short was made to wait in the node's even split, or refused: of
// 100 under PerSecond(100), 50 refused and 25 made to wait on 4 nodes, 71
// to 75 refused on 8. It now asks again after each such answer, as AllowN
// does, until the fleet has room or AskWait ends.
func TestAsyncStickyBurstOfReservationsIsMadeWhole(t *testing.T) {
	for _, n := range []int{4, 8} {
		t.Run(string(rune('0'+n))+" nodes", func(t *testing.T) {
			srv := redistest.Start(t)
			nodes := unevenFleet(t, srv, n, hybrid.Config{})
			lim := hybrid.PerSecond(100)
			began := time.Now()
			acts, refused := reserveBurst(t, nodes[0], "sticky", lim, 100)
			delayed := 0
			for _, at := range acts {
				if at.Sub(began) > time.Second {
					delayed++ // to wait at all is wrong; this only counts the waits no round trip explains
				}
			}
			t.Logf("%d of 100 refused, %d made to wait past a second, in %v", refused, delayed, time.Since(began))
			assert.Zero(t, refused, "an exact limiter makes the whole burst")
			assert.Zero(t, delayed, "and at once")
			assert.Equal(t, 100, len(acts))
		})
	}
}

// The other side: every node reserves a burst as large as the limit at
// once. The fleet's reservations act within the bound.
func TestAsyncReservationBurstsOnEveryNodeStayWithinTheBound(t *testing.T) {
	for _, n := range []int{4, 8} {
		t.Run(string(rune('0'+n))+" nodes", func(t *testing.T) {
			srv := redistest.Start(t)
			nodes := unevenFleet(t, srv, n, hybrid.Config{})
			const rate = 100
			lim := hybrid.PerSecond(rate)
			var mu sync.Mutex
			var all []time.Time
			refused := 0
			var wg sync.WaitGroup
			for _, l := range nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					acts, r := reserveBurst(t, l, "every", lim, rate)
					mu.Lock()
					defer mu.Unlock()
					all, refused = append(all, acts...), refused+r
				}()
			}
			wg.Wait()
			w := time.Second
			bound := fleetsim.AsyncBound(rate, rate, hybrid.DefaultSyncInterval, 10*time.Millisecond, n, w)
			worst := maxIn(all, w)
			t.Logf("%d nodes: %d made, %d refused; at most %d act within %v (an exact limiter: %.0f, the bound %.0f)",
				n, len(all), refused, worst, w, fleetsim.Limit(rate, rate, w), bound)
			assert.LessOrEqual(t, float64(worst), bound, "the fleet's reservations act within the bound")
			assert.GreaterOrEqual(t, len(all), rate, "the fleet makes at least its burst")
		})
	}
}
