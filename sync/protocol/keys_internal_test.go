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

// Within ten intervals of a no-room answer, a short request still waits
// for its ask, which the pool serves, where refused alone it would be the
// request an exact limiter admits: a node whose demand does not hold a
// request of its own (the pool serves it request by request), and a
// pooled key (one request weighs more than an even split: all its room is
// in the pool, and comes when the store said).
func TestAShortRequestThePoolServesWaitsToBeServed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
		burst int64
		rate  float64 // the node's demand, a second
		serve bool    // the op asks the pool to serve the request (else to grow the node's share for it)
	}{
		{"a demand that holds no request", 2, 2, 0.5, true}, // an even split holds one request
		// An even split holds a third of a request, a share of a third of
		// the key holds one: the node grows toward its demand.
		{"a pooled key, a demand over its limit", 4, 3, 500, false},
		// One request needs the whole key: a share that holds it is the
		// whole key, which the pool serves (a home, if nobody else asks):
		// grown, it would be called from node to node, its room spent.
		{"a request of the whole limit, a demand over it", 2, 1, 500, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, lim := "k", limit.PerSecond(100).WithBurst(tc.burst)
			s, at := toldNoRoom(t, tc.nodes, key, lim)
			s.mu.Lock()
			ks := s.keys[keyLim{key, lim}]
			ks.rate, ks.hits, ks.rateAt = tc.rate, 0, share.Micros(at)
			s.mu.Unlock()
			w, refuse, _ := s.Short(at, at, key, lim, 1, at+int64(time.Second), nil)
			if refuse || w == nil {
				t.Fatalf("refused alone (%s)", s.Describe(key, lim))
			}
			ops := s.NextOps(at, 0)
			if len(ops) != 1 || ops[0].Serve != tc.serve || ops[0].AskedAt == 0 {
				t.Fatalf("ops %+v: want one op asking for the waiting request (served by the pool: %v)", ops, tc.serve)
			}
		})
	}
}

// toldNoRoom returns a node of a fleet of nodes (20 ms intervals) whose
// request of (key, lim), short of its even split, asked the store and was
// told no room, not exactly (other nodes hold grants), and at (ns), three
// intervals on, when the node's next request of the key is decided.
func toldNoRoom(t *testing.T, nodes int, key string, lim limit.Limit) (s *Shares, at int64) {
	t.Helper()
	eng, err := local.New(local.Config{Shards: 4, MaxKeys: 1 << 16, TrackSpend: true, Asks: true})
	if err != nil {
		t.Fatal(err)
	}
	iv := 20 * time.Millisecond
	s = New(Config{Interval: iv, AskWait: time.Second}, eng)
	now := time.Unix(1_800_000_000, 0).UnixNano()
	s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: share.Micros(now), Nodes: nodes}, nil, now)
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
	if len(ops) != 1 {
		t.Fatalf("ops %d", len(ops))
	}
	us := share.Micros(now)
	s.OpsDone(ops, []share.Reply{{Outcome: share.NoRoom, Epoch: us, Grant: 0, Expiry: us + 3_600_000_000,
		Until: us + 2*share.Duration(iv), Now: us}}, nil, false, now) // others hold grants: not exact
	at = now + 3*int64(iv)
	s.Tick(at)
	return s, at
}
