package protocol_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// A call is published a second time only within its window (two
// intervals), as it was: a node that called once, got its room, and long
// after is told Wait (another node's call is under way, or a new contest
// waits for joins) publishes nothing. (Found in review: it published a new
// call stamped with the Wait's time, which the store never made, and every
// holder gave again; in the simulation, seed 921337 went past the bound.)
func TestAnAnsweredCallIsNotPublishedAgainLater(t *testing.T) {
	const iv = int64(testInterval)
	key, lim := "k", limit.PerSecond(10)
	s, _, now := newShortShares(t, 2, key, lim)
	epoch := share.Micros(now)
	expiry := epoch + 3_600_000_000
	reply := func(at int64, r share.Reply) {
		t.Helper()
		ops := s.NextOps(at, 0)
		if len(ops) != 1 {
			t.Fatalf("ops %d at %v", len(ops), time.Duration(at-now))
		}
		r.Epoch, r.Expiry, r.Now = epoch, expiry, share.Micros(at)
		s.OpsDone(ops, []share.Reply{r}, nil, false, at)
	}
	calls := func(at int64) []int64 {
		b := s.NextBeat(at)
		s.BeatDone(b, &share.BeatReply{Now: share.Micros(at), Nodes: 2, Next: share.Micros(at)}, nil, at)
		var out []int64
		for _, c := range b.Contests {
			if c.CallAt > 0 {
				out = append(out, c.CallAt)
			}
		}
		return out
	}
	// The node asks; the store calls; the call goes out once.
	if _, refuse, _ := s.Short(now, now, key, lim, 1, now+int64(time.Second), nil); refuse {
		t.Fatal("refused")
	}
	reply(now, share.Reply{Outcome: share.Call})
	if got := calls(now); len(got) != 1 {
		t.Fatalf("the call: %v", got)
	}
	// Half an interval on, the call answered: the store serves the request.
	at := now + iv/2
	s.Tick(at)
	if _, refuse, _ := s.Short(at, now, key, lim, 1, now+int64(time.Second), nil); refuse {
		t.Fatal("refused")
	}
	reply(at, share.Reply{Outcome: share.Done, Served: 1, ServedAt: share.Micros(at)})
	calls(at)

	// Ten intervals later (five call windows), the node asks again and is
	// told Wait: another node's call is under way. It made no call now.
	at = now + 10*iv
	s.Tick(at)
	w, refuse, _ := s.Short(at, at, key, lim, 1, at+int64(time.Second), nil)
	if refuse || w == nil {
		t.Fatal("refused")
	}
	reply(at, share.Reply{Outcome: share.Wait})
	if got := calls(at); len(got) != 0 {
		t.Errorf("a Wait %v after a call the store answered long ago: the beat publishes a new call at %v (%v after the original), which the store never made",
			time.Duration(at-now), got, time.Duration(got[0]-epoch)*time.Microsecond)
	}
	_ = protocol.Retry
}

// A node's first active window (every round beats: a fleet is forming) is
// measured on the store's clock, from its first heartbeat's answer. (Found
// in review: it was taken from the time the first beat was sent, the local
// clock before the offset had a sample, so a node 5 s behind Redis was
// quiet from its first rounds, and one 5 s ahead beat every interval for
// 6 s.)
func TestTheFirstActiveWindowIsOnTheStoresClock(t *testing.T) {
	const iv = int64(testInterval)
	for _, skew := range []time.Duration{-5 * time.Second, 5 * time.Second} {
		t.Run(fmt.Sprintf("local clock %v off Redis", skew), func(t *testing.T) {
			s := protocol.New(protocol.Config{Interval: testInterval}, newEngine(t))
			redis := time.Unix(1_800_000_000, 0).UnixNano()
			local := redis + int64(skew) // what a.now() is before the first sample
			b := s.NextBeat(local)
			s.BeatDone(b, &share.BeatReply{Now: share.Micros(redis), Nodes: 2, Next: share.Micros(redis)}, nil, redis)
			s.Subscribed(redis)
			// Rounds every interval on Redis's clock from now on (the runner's
			// a.now() once Offset has its first sample).
			var quietAt, lastDue int64 = -1, -1
			for at := redis + iv; at <= redis+int64(2*time.Second); at += iv {
				s.Tick(at)
				if s.BeatDue(at) {
					lastDue = at - redis
					s.BeatDone(s.NextBeat(at), &share.BeatReply{Now: share.Micros(at), Nodes: 2, Next: share.Micros(redis)}, nil, at)
				} else if quietAt < 0 {
					quietAt = at - redis
				}
			}
			window := int64(time.Second) // the default active window
			if quietAt >= 0 && quietAt < window {
				t.Errorf("quiet %v after its start, within its first active window (%v)", time.Duration(quietAt), time.Duration(window))
			}
			if quietAt < 0 || quietAt > window+10*iv {
				t.Errorf("never quiet in 2 s after its first active window (first quiet round: %v; last round beaten %v)", time.Duration(quietAt), time.Duration(lastDue))
			}
		})
	}
}
