package protocol

import (
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
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
			eng, err := local.New(local.Config{Shards: 4, MaxKeys: 1 << 16, TrackSpend: true, Asks: true})
			if err != nil {
				t.Fatal(err)
			}
			iv := 20 * time.Millisecond
			s := New(Config{Interval: iv, AskWait: time.Second}, eng)
			now := time.Unix(1_800_000_000, 0).UnixNano()
			s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: share.Micros(now), Nodes: 4}, nil, now)
			for i := 0; ; i++ {
				if _, err := eng.AllowN(now, key, lim, 1); errors.Is(err, local.ErrShort) {
					break
				}
				if i > 100 {
					t.Fatal("never short")
				}
			}
			s.Short(now, now, key, lim, 1, now+int64(time.Second), nil)
			ops := s.NextOps(now, 0)
			us := share.Micros(now)
			s.OpsDone(ops, []share.Reply{{Outcome: share.NoRoom, Epoch: us, Expiry: us + 3_600_000_000,
				Until: us + 2*share.Duration(iv), Now: us}}, nil, false, now)
			at := now + 3*int64(iv)
			s.Tick(at)
			s.mu.Lock()
			ks := s.keys[keyLim{key, lim}]
			ks.rate, ks.hits, ks.rateAt = 500, 0, share.Micros(at) // demand 5x the limit, all on this node
			ks.maxWeight = tc.maxWeight
			ks.callSeen = share.Micros(at) - 1000 // another node asked 1 ms ago (its call took this node's home)
			s.mu.Unlock()
			s.Short(at, at, key, lim, 1, at+int64(time.Second), nil)
			ops = s.NextOps(at, 0)
			if len(ops) != 1 {
				t.Fatalf("ops %d", len(ops))
			}
			if ops[0].Serve != tc.served {
				t.Errorf("served by the pool: %v (need %d), want %v", ops[0].Serve, ops[0].Need, tc.served)
			}
		})
	}
}
