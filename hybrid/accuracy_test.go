package hybrid_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// The accuracy of Async mode, against real Redis: four nodes, each with its
// own client, offered twice the limit for ten seconds at a 10 ms interval.
// The fleet's admissions must stay within the bound docs/accuracy.md derives
// (fleetsim.AsyncBound) over the whole run and over every one-second window,
// and within the targets of the limit: 2% spread evenly, 5% with 90%
// on one node, 10% while Redis is down.

const (
	accRate     = 1000
	accBurst    = 100
	accNodes    = 4
	accInterval = 10 * time.Millisecond
	accDuration = 10 * time.Second
	// accRTT is a generous round trip on loopback under the race detector;
	// the bound grows by rate·rtt·3/4 = 7.5 requests per 10 ms of it.
	accRTT = 10 * time.Millisecond
)

var accLimit = hybrid.PerSecond(accRate).WithBurst(accBurst)

// lazyNode is a fleet node that may join late (made when it joins) or leave
// early (closed when it leaves).
type lazyNode struct {
	l atomic.Pointer[hybrid.Limiter]
}

func (n *lazyNode) AllowN(ctx context.Context, key string, lim hybrid.Limit, k int64) (hybrid.Decision, error) {
	l := n.l.Load()
	if l == nil {
		return hybrid.Decision{}, nil // absent: the load gives it nothing anyway
	}
	return l.AllowN(ctx, key, lim, k)
}

func accNode(t *testing.T, srv *redistest.Server, prefix string) *hybrid.Limiter {
	t.Helper()
	c := srv.Client(t, func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialTimeout = 200 * time.Millisecond
		o.ReadTimeout = 200 * time.Millisecond
	})
	l, err := hybrid.New(hybrid.Config{Redis: c, Prefix: prefix, SyncInterval: accInterval, BreakerOpenFor: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// within asserts |got-want| <= tol·want and logs the error.
func within(t *testing.T, got, want, tol float64, what string) {
	t.Helper()
	t.Logf("%s: admitted %.0f of %.0f (%+.2f%%, target ±%.0f%%)", what, got, want, 100*(got-want)/want, 100*tol)
	assert.LessOrEqual(t, math.Abs(got-want), tol*want, "%s: admitted %.0f, want %.0f ± %.0f%%", what, got, want, 100*tol)
}

// accurate is within for the run's admissions in [from, to) (the whole
// run when to is 0). The upper side always holds: no machine makes the
// limiter admit more. The lower side is a measurement of a load offered on
// time: when the load's driver starved (fleetsim's Starved: it went
// without offering for longer than the limit's burst covers), what was not
// offered in time was not admitted, shares lagged the demand that came in
// bursts, and the figure says more about the machine than the limiter: it
// is logged, not asserted.
func accurate(t *testing.T, tl *fleetsim.Timeline, from, to time.Duration, want, tol float64, what string) {
	t.Helper()
	got := float64(tl.Total().Admitted)
	if to > 0 {
		got = float64(tl.Admitted(from, to))
	}
	if tl.Starved == 0 {
		within(t, got, want, tol, what)
		return
	}
	// A whole run that went on past its duration (slow decisions caught
	// up after it) had that much more time to refill.
	more := 0.0
	if to == 0 && tl.Span > accDuration {
		more = accRate * (tl.Span - accDuration).Seconds()
	}
	t.Logf("%s: admitted %.0f of %.0f (%+.2f%%, target ±%.0f%%), with the load's driver starved for %v and the run %v long: the lower side not asserted",
		what, got, want, 100*(got-want)/want, 100*tol, tl.Starved, tl.Span)
	assert.LessOrEqual(t, got, want*(1+tol)+more, "%s: admitted %.0f, want at most %.0f", what, got, want*(1+tol)+more)
}

// bounded asserts the run never beat the bound, over the whole run and over
// every one-second window.
func bounded(t *testing.T, tl *fleetsim.Timeline, nodes int) {
	t.Helper()
	// A decision is put in its bucket when its driver gets to it, late by
	// up to the longest the driver went between two turns (fleetsim's
	// Stalled: about a millisecond idle, longer on a starved machine); and
	// the run lasts that much longer.
	late := tl.Stalled
	total := float64(tl.Total().Admitted)
	b := fleetsim.AsyncBound(accRate, accBurst, accInterval, accRTT, nodes, max(accDuration, tl.Span)+late)
	assert.LessOrEqual(t, total, b, "over the run: %.0f > bound %.0f", total, b)
	worst, at := tl.MaxWindow(time.Second)
	b1 := fleetsim.AsyncBound(accRate, accBurst, accInterval, accRTT, nodes, time.Second+late)
	t.Logf("worst one-second window: %d at %v (bound %.0f)", worst, at, b1)
	assert.LessOrEqual(t, float64(worst), b1, "one-second window at %v: %d > bound %.0f", at, worst, b1)
}

func TestAccuracy(t *testing.T) {
	srv := redistest.Start(t)
	drive := func(t *testing.T, nodes []fleetsim.Decider, weight func(int, time.Duration) float64) *fleetsim.Timeline {
		tl, err := fleetsim.Drive(context.Background(), nodes, fleetsim.Run{Key: "acc", Limit: accLimit, Duration: accDuration},
			fleetsim.Load{Rate: 2 * accRate, Weight: weight})
		require.NoError(t, err)
		require.NoError(t, tl.FirstError)
		return tl
	}
	fleet := func(t *testing.T, prefix string) []fleetsim.Decider {
		var nodes []fleetsim.Decider
		for range accNodes {
			nodes = append(nodes, accNode(t, srv, prefix))
		}
		return nodes
	}
	limit := fleetsim.Limit(accRate, accBurst, accDuration)

	t.Run("spread evenly", func(t *testing.T) {
		t.Parallel()
		tl := drive(t, fleet(t, "even:"), nil)
		accurate(t, tl, 0, 0, limit, 0.02, "spread evenly")
		bounded(t, tl, accNodes)
	})

	t.Run("90% on one node", func(t *testing.T) {
		t.Parallel()
		tl := drive(t, fleet(t, "skew:"), func(i int, _ time.Duration) float64 {
			if i == 0 {
				return 0.9
			}
			return 0.1 / 3
		})
		accurate(t, tl, 0, 0, limit, 0.05, "90% on one node")
		bounded(t, tl, accNodes)
	})

	t.Run("nodes joining and leaving", func(t *testing.T) {
		t.Parallel()
		// Nodes 0 and 1 from the start; 2 and 3 join at 3 s (made then);
		// node 1 leaves at 6 s (closed then).
		nodes := make([]*lazyNode, accNodes)
		deciders := make([]fleetsim.Decider, accNodes)
		for i := range nodes {
			nodes[i] = &lazyNode{}
			deciders[i] = nodes[i]
		}
		nodes[0].l.Store(accNode(t, srv, "churn:"))
		nodes[1].l.Store(accNode(t, srv, "churn:"))
		joined := time.AfterFunc(3*time.Second, func() {
			nodes[2].l.Store(accNode(t, srv, "churn:"))
			nodes[3].l.Store(accNode(t, srv, "churn:"))
		})
		left := time.AfterFunc(6*time.Second, func() {
			l := nodes[1].l.Swap(nil)
			_ = l.Close(context.Background())
		})
		defer joined.Stop()
		defer left.Stop()
		tl := drive(t, deciders, func(i int, at time.Duration) float64 {
			switch {
			case i >= 2 && at < 3*time.Second+50*time.Millisecond: // not yet joined
				return 0
			case i == 1 && at >= 6*time.Second-50*time.Millisecond: // gone
				return 0
			}
			return 1
		})
		t.Logf("nodes joining and leaving: admitted %d of %.0f", tl.Total().Admitted, limit)
		bounded(t, tl, accNodes)
	})

	// The controls: the same load on synchronous nodes (exact) and on
	// local-only nodes (each its own limit: four times over). The second
	// also shows this test can see over-admission.
	t.Run("control: sync", func(t *testing.T) {
		t.Parallel()
		var nodes []fleetsim.Decider
		for range accNodes {
			// The control is about exactness: a Redis timeout long enough
			// that a loaded machine's scheduling does not send decisions to
			// the fallback.
			l, err := hybrid.New(hybrid.Config{Redis: srv.Client(t), Prefix: "sync:", Mode: hybrid.Sync, RedisTimeout: time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			nodes = append(nodes, l)
		}
		tl := drive(t, nodes, nil)
		// Redis decides exactly. A decision that still timed out was made
		// from memory under the fallback: it may admit once more each.
		total := tl.Total()
		degraded := float64(total.Sources[hybrid.Degraded])
		if degraded == 0 {
			accurate(t, tl, 0, 0, limit, 0.01, "sync")
		} else {
			t.Logf("sync: %v decisions timed out and were made under the fallback", degraded)
			more := accRate * max(tl.Span-accDuration, 0).Seconds() // a run that caught up past its duration
			assert.LessOrEqual(t, float64(total.Admitted), limit*1.01+more+degraded, "sync: exact, but for the decisions made under the fallback")
		}
		// A decision is put in its bucket when its driver gets to it: late
		// by up to the longest the driver went between two turns.
		worst, _ := tl.MaxWindow(time.Second)
		assert.LessOrEqual(t, float64(worst), fleetsim.Limit(accRate, accBurst, time.Second)+accRate*(0.1+tl.Stalled.Seconds())+degraded,
			"sync: no window beyond the limit (and a bucket of timing, the driver's lateness (%v), and the fallback's decisions)", tl.Stalled)
	})
	t.Run("control: local only", func(t *testing.T) {
		t.Parallel()
		var nodes []fleetsim.Decider
		for range accNodes {
			l, err := hybrid.New(hybrid.Config{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			nodes = append(nodes, l)
		}
		tl := drive(t, nodes, nil)
		got := float64(tl.Total().Admitted)
		t.Logf("local only: admitted %.0f of %.0f (%.2fx)", got, limit, got/limit)
		// Each node admits its own limit, up to the 500/s it is offered.
		assert.Greater(t, got, 1.9*limit, "local only is not shared: the fleet admits what it is offered")
		assert.Greater(t, got, fleetsim.AsyncBound(accRate, accBurst, accInterval, accRTT, accNodes, accDuration), "the bound would catch it")
	})

	t.Run("Redis down", func(t *testing.T) {
		t.Parallel()
		down := redistest.Start(t)
		var nodes []fleetsim.Decider
		for range accNodes {
			nodes = append(nodes, accNode(t, down, "down:"))
		}
		kill := time.AfterFunc(3*time.Second, down.Kill)
		defer kill.Stop()
		restart := time.AfterFunc(8*time.Second, down.Restart)
		defer restart.Stop()
		tl := drive(t, nodes, nil)
		// From the breaker opening (a few failed rounds and its open
		// interval) until Redis returns: every node on a quarter.
		from, to := 3500*time.Millisecond, 8*time.Second
		degraded := 0
		for _, b := range tl.Fleet() {
			if b.Start >= from && b.Start < to {
				degraded += b.Sources[hybrid.Degraded]
			}
		}
		assert.Positive(t, degraded, "decisions were made degraded")
		accurate(t, tl, from, to, accRate*(to-from).Seconds(), 0.10, "while Redis is down")
		bounded(t, tl, accNodes)
	})
}
