package protocol

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// Only a key one request of weight 1 of which needs the whole limit (burst
// 1) is served by the pool request by request whatever the node's demand;
// any other with a demand over the limit on this node is grown toward it:
// a key of burst 3, even after the node saw a request of the whole burst
// (the heaviest request seen is kept), and a leaky bucket (whose share for
// any request is the whole meter). Here the node's home was just called
// away (another node's call 1 ms ago), so growth is the only way it holds
// any of the key.
func TestOnlyAKeyOfBurstOneIsServedWhateverItsDemand(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lim       limit.Limit
		maxWeight int64 // the heaviest request the node saw before
		served    bool
	}{
		{"token bucket burst 3, weight 1 only", limit.PerSecond(100).WithBurst(3), 1, false},
		{"token bucket burst 3, one AllowN(3) seen once", limit.PerSecond(100).WithBurst(3), 3, false},
		{"leaky bucket 100/s burst 3", limit.PerSecond(100).WithBurst(3).WithAlgorithm(limit.LeakyBucket), 1, false},
		{"token bucket burst 1", limit.PerSecond(100).WithBurst(1), 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, lim := "k", tc.lim
			s, at := toldNoRoom(t, 4, key, lim)
			s.mu.Lock()
			ks := s.keys[keyLim{key, lim}]
			ks.rate, ks.hits, ks.rateAt = 500, 0, share.Micros(at) // demand 5x the limit, all on this node
			ks.maxWeight = tc.maxWeight
			ks.callSeen = share.Micros(at) - 1000 // another node asked 1 ms ago (its call took this node's home)
			s.mu.Unlock()
			s.Short(at, at, key, lim, 1, at+int64(time.Second), nil)
			ops := s.NextOps(at, 0)
			if len(ops) != 1 {
				t.Fatalf("ops %d", len(ops))
			}
			if ops[0].Serve != tc.served {
				t.Errorf("served by the pool: %v (need %d), want %v", ops[0].Serve, ops[0].Need, tc.served)
			}
		})
	}
}
