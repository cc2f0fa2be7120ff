package protocol

import (
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/share"
)

// TestAStaleWaitingKeyLeavesItsSuccessorAlone's path, from inside: no key
// the node has forgotten stays in s.order (before the fix, the successor
// the stale key deleted kept its op for ever and was swept every interval).
func TestNoForgottenKeyStaysInOrder(t *testing.T) {
	key, lim := "k", limit.PerSecond(10)
	eng, err := local.New(local.Config{Shards: 4, MaxKeys: 1 << 16, TrackSpend: true, Asks: true})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Interval: 20 * time.Millisecond, AskWait: time.Second}, eng)
	now := time.Unix(1_800_000_000, 0).UnixNano()
	s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: share.Micros(now), Nodes: 3}, nil, now)
	for {
		if _, err := eng.AllowN(now, key, lim, 1); errors.Is(err, local.ErrShort) {
			break
		}
	}
	s.Tick(now)
	s.Short(now, now, key, lim, 1, now+int64(time.Second), nil)
	ops := s.NextOps(now, 0)
	at := now + int64(time.Millisecond)
	s.OpsDone(ops, []share.Reply{{Outcome: share.Ended}}, nil, false, at)
	s.Short(at, now, key, lim, 1, now+int64(time.Second), nil)
	ops = s.NextOps(at, 0)
	s.Tick(at + int64(time.Millisecond))
	s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Served: 1, ServedAt: share.Micros(at)}}, nil, false, at+int64(2*time.Millisecond))
	for i := 1; i <= 500; i++ { // 10 s of sweeps
		s.Tick(now + int64(i)*int64(20*time.Millisecond))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ks := range s.order {
		if s.keys[ks.kl] != ks {
			t.Errorf("s.order holds a key not in s.keys after 10 s: gone=%v op=%v waiters=%d (leaked, swept every interval)", ks.gone, ks.op != nil, len(ks.waiters))
		}
	}
	t.Logf("order %d keys %d", len(s.order), len(s.keys))
}
