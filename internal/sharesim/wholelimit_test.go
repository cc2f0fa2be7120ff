package sharesim

import (
	"fmt"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/storemodel"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// A key one request of which needs its whole limit (a per-client key of
// burst 1) is served by the pool request by request, never grown into a
// node's share, however much of it the node sees: the share that holds one
// request is the whole key, every other node asking for it would call it
// away, and, the key over its limit, it would move spent from node to node
// a call and two ops at a time. Sent at random to 6 nodes at twice to ten
// times the limit (where each node's demand alone fills the key), the
// store is asked to grow nothing, costs less than Sync's op a request at
// ten times, and the fleet admits what one exact limiter does.
func TestAKeyWhoseRequestIsItsWholeLimitIsServedNotGrown(t *testing.T) {
	lim := limit.Per(1, time.Second).WithBurst(1).Canonical()
	for _, tc := range []struct {
		rate      float64 // requests a second, all nodes together
		opsBefore float64 // the most ops a request may cost
	}{
		{2, 1.1},
		{6, 1},
		{10, 0.8},
	} {
		t.Run(fmt.Sprintf("%g a second", tc.rate), func(t *testing.T) {
			var kinds opKinds
			var ops, requests, admitted, exact int64
			for seed := int64(1); seed <= 4; seed++ {
				sc := spreadScenario(seed, 6, 1, lim, tc.rate, 0)
				exact += exactAdmits(sc.Requests, 0, lim, 0)
				rec := RunOn(sc, &kindStore{ModelStore: ModelStore{Model: storemodel.New(share.Duration(sc.ActiveWindow))}, kinds: &kinds})
				ops += rec.Ops
				requests += int64(len(sc.Requests))
				for _, d := range rec.Decisions {
					if d.Allowed {
						admitted++
					}
				}
			}
			t.Logf("%d requests: %d ops (%.2f a request: %d served, %d grown, %d given back, %d calls), admitted %d (exact %d)",
				requests, ops, float64(ops)/float64(requests), kinds.serve, kinds.ask, kinds.give, kinds.call, admitted, exact)
			if kinds.ask != 0 {
				t.Errorf("%d asks to grow a node's share of a key one request of which is the whole limit: want 0 (served by the pool)", kinds.ask)
			}
			if got := float64(ops) / float64(requests); got > tc.opsBefore {
				t.Errorf("%.2f ops a request, want at most %.2f", got, tc.opsBefore)
			}
			if admitted != exact {
				t.Errorf("admitted %d, one exact limiter %d", admitted, exact)
			}
		})
	}
}
