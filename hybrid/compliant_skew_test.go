package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// Compliant traffic (20% of the limit, spread evenly over 4 nodes) that
// follows, after a full refill time, a spell in which one node alone was over
// its even split. The key is still contested (its claim lives 2 s after its
// last renewal), and the three other nodes hold no share of it (or the
// floor of a tenth of an even split): they refuse, or send to Redis, the
// first compliant requests.
func TestCompliantAfterAHotspot(t *testing.T) {
	srv := redistest.Start(t)
	lim := hybrid.PerSecond(1000) // burst 1000, refills in 1 s
	// AskWait well above the default two intervals (20 ms): what this test
	// holds is that the room moves to the nodes that need it, not how fast
	// a starved machine moves it. Beside stress-ng and more (make
	// test-under-load), 10 of 396 requests were refused when the default
	// AskWait ended, the room on its way (counted in AskTimeouts).
	nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "rc:", AskWait: 250 * time.Millisecond})
	ctx := context.Background()
	// Phase 1: node 0 alone at 60% of the limit (under it) for 1 s.
	_, err := fleetsim.Drive(ctx, deciders(nodes), fleetsim.Run{Key: "k", Limit: lim, Duration: time.Second},
		fleetsim.Load{Rate: 600, Weight: func(i int, _ time.Duration) float64 {
			if i == 0 {
				return 1
			}
			return 0
		}})
	require.NoError(t, err)
	// Idle for longer than the bucket takes to refill.
	time.Sleep(1200 * time.Millisecond)
	// Phase 2: 20% of the limit, spread evenly.
	tl, err := fleetsim.Drive(ctx, deciders(nodes), fleetsim.Run{Key: "k", Limit: lim, Duration: 2 * time.Second},
		fleetsim.Load{Rate: 200})
	require.NoError(t, err)
	require.NoError(t, tl.FirstError)
	total := tl.Total()
	t.Logf("compliant phase: offered %d, admitted %d, sources (local, remote, degraded) %v, p99 latency %v, max %v",
		total.Offered, total.Admitted, total.Sources, tl.Percentile(0.99), tl.Percentile(1))
	assert.Equal(t, total.Offered, total.Admitted, "nothing refused: 20% of the limit, spread evenly, the bucket full")
}

// The same key contested with skewed demand under the limit (node 0 at 90%
// of it, the others at 1% each), then traffic at 20% of the limit spread
// evenly, through an outage of Redis (killed or stopped for 3 s). After the
// outage each node goes back to the grant Redis gave it before: the three
// that had little demand then hold a small share of a key now evenly used.
// A paused Redis expires the contest; each node's op from before the pause,
// sent again after it, must not count its grant twice (the fleet was
// refused 90% of its traffic for seconds after the outage when it did).
// Requests refused because AskWait ended first are counted (AskTimeouts):
// on a loaded machine a few are, and the test allows 1%.
func TestCompliantThroughAnOutageAfterSkewedDemand(t *testing.T) {
	for _, fault := range []string{"kill", "stop"} {
		t.Run(fault, func(t *testing.T) {
			srv := redistest.Start(t)
			lim := hybrid.PerSecond(1000)
			// AskWait above the default, as in TestCompliantAfterAHotspot:
			// what this test holds is that the grants come back right after
			// the outage, not how fast a starved machine answers an ask
			// (make test: 16 refused after the recovery where 1% is allowed,
			// and 31 asks that timed out at 20 ms over the run).
			nodes := shapeFleet(t, srv, 4, hybrid.Config{Prefix: "ro:", BreakerOpenFor: 200 * time.Millisecond, AskWait: 250 * time.Millisecond})
			ctx := context.Background()
			_, err := fleetsim.Drive(ctx, deciders(nodes), fleetsim.Run{Key: "k", Limit: lim, Duration: 1500 * time.Millisecond},
				fleetsim.Load{Rate: 930, Weight: func(i int, _ time.Duration) float64 {
					if i == 0 {
						return 90
					}
					return 1
				}})
			require.NoError(t, err)
			done := make(chan *fleetsim.Timeline, 1)
			begin := time.Now()
			go func() {
				tl, _ := fleetsim.Drive(ctx, deciders(nodes), fleetsim.Run{Key: "k", Limit: lim, Duration: 8 * time.Second},
					fleetsim.Load{Rate: 200})
				done <- tl
			}()
			time.Sleep(time.Second)
			faultAt := time.Since(begin)
			if fault == "kill" {
				srv.Kill()
			} else {
				srv.Pause()
			}
			time.Sleep(3 * time.Second)
			if fault == "kill" {
				srv.Restart()
			} else {
				srv.Resume()
			}
			healAt := time.Since(begin)
			tl := <-done
			require.NoError(t, tl.FirstError)
			total := tl.Total()
			// Nothing refused before the fault, nor once the fleet is back
			// (a second after Redis returned). Between the two, a request
			// beyond its node's share that was waiting for the fleet when
			// Redis went away is refused when its wait ends, before the
			// breaker opens (docs/accuracy.md, "Known shortfalls"): those
			// are counted and logged.
			var before, during, after int
			for b, bk := range tl.Fleet() {
				at := time.Duration(b) * tl.Bucket
				refused := bk.Offered - bk.Admitted
				if refused == 0 {
					continue
				}
				t.Logf("  %v: offered %d admitted %d sources %v", at, bk.Offered, bk.Admitted, bk.Sources)
				switch {
				case at+tl.Bucket <= faultAt:
					before += refused
				case at >= healAt+time.Second:
					after += refused
				default:
					during += refused
				}
			}
			late := uint64(0)
			for _, l := range nodes {
				late += l.Stats().AskTimeouts
			}
			t.Logf("20%% of the limit spread evenly through the outage: offered %d, admitted %d, sources %v; refused before the fault %d, around it %d, after the recovery %d; refused when AskWait ended %d",
				total.Offered, total.Admitted, total.Sources, before, during, after, late)
			// An exact limiter refuses none of it. On a loaded machine a
			// few requests wait out AskWait before the fleet moves the room
			// (docs/accuracy.md, "Known shortfalls"; counted in
			// AskTimeouts): up to 1% is allowed. The fault this test was
			// written for, an op counted twice after a pause, refused 90%
			// of the traffic for seconds.
			allowed := total.Offered / 100
			assert.LessOrEqual(t, before, allowed, "nothing refused before the fault but a loaded machine's late answers")
			assert.LessOrEqual(t, after, allowed, "nothing refused once the fleet is back but a loaded machine's late answers")
			if before > 0 {
				assert.Positive(t, late, "refusals before the fault were late answers, and counted")
			}
		})
	}
}
