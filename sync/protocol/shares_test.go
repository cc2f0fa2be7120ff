package protocol_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/share"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

const testInterval = 20 * time.Millisecond

// newEngine is an engine as the runner makes one for Async mode (Asks),
// small.
func newEngine(tb testing.TB) *local.Engine {
	tb.Helper()
	eng, err := local.New(local.Config{Shards: 4, MaxKeys: 1 << 16, TrackSpend: true, Asks: true})
	if err != nil {
		tb.Fatal(err)
	}
	return eng
}

// newShortShares is a Shares without Redis, on a fleet of nodes, with the
// key's even split on this node spent (the next request is short).
func newShortShares(t *testing.T, nodes int, key string, lim limit.Limit) (*protocol.Shares, *local.Engine, int64) {
	t.Helper()
	eng := newEngine(t)
	s := protocol.New(protocol.Config{Interval: testInterval, AskWait: time.Second}, eng)
	now := time.Unix(1_800_000_000, 0).UnixNano()
	s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: share.Micros(now), Nodes: nodes}, nil, now)
	for i := 0; ; i++ {
		_, err := eng.AllowN(now, key, lim, 1)
		if errors.Is(err, local.ErrShort) {
			break
		}
		if i > 1000 {
			t.Fatal("never short")
		}
	}
	return s, eng, now
}

// A key forgotten while requests waited on it (here: its contest ended)
// stays in the list of waiting keys, marked gone, until the next Tick. The
// retried request makes a new state for the same (key, limit). The next
// Tick between sweeps visits the stale one: forgetting it must not delete
// the new one, or the new key's answer is dropped (a request the store
// admitted is refused at its deadline) and its state is left with an op
// for ever. (It did, found in review, before forget checked the state it
// deletes is still the key's.)
func TestAStaleWaitingKeyLeavesItsSuccessorAlone(t *testing.T) {
	key, lim := "k", limit.PerSecond(10)
	s, _, now := newShortShares(t, 3, key, lim)
	s.Tick(now) // a sweep: the next one an interval on

	w1, refuse, _ := s.Short(now, now, key, lim, 1, now+int64(time.Second), nil)
	if refuse || w1 == nil {
		t.Fatal("refused")
	}
	ops := s.NextOps(now, 0)
	if len(ops) != 1 {
		t.Fatalf("ops %d", len(ops))
	}
	at := now + int64(time.Millisecond)
	s.OpsDone(ops, []share.Reply{{Outcome: share.Ended, Now: share.Micros(at)}}, nil, false, at)
	if v, _ := w1.Verdict(); v != protocol.Retry {
		t.Fatalf("w1 %v", v)
	}
	// The request decides again, is still short, and waits again.
	at += int64(time.Millisecond)
	w2, refuse, _ := s.Short(at, now, key, lim, 1, now+int64(time.Second), nil)
	if refuse || w2 == nil {
		t.Fatal("refused")
	}
	ops = s.NextOps(at, 0) // its ask is sent
	if len(ops) != 1 {
		t.Fatalf("ops %d", len(ops))
	}
	at += int64(time.Millisecond)
	s.Tick(at) // between sweeps: visits s.waiting
	if d := s.Describe(key, lim); d == "even (no state)" {
		t.Errorf("a Tick between sweeps dropped the key a request waits on from s.keys: %s", d)
	}
	at += int64(time.Millisecond)
	s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Served: 1, ServedAt: share.Micros(at), Now: share.Micros(at)}}, nil, false, at)
	select {
	case <-w2.Done():
		if v, _ := w2.Verdict(); v != protocol.Admitted {
			t.Errorf("w2: %v, want Admitted (the store admitted it)", v)
		}
	default:
		t.Errorf("the store admitted the waiting request (Served 1), but its waiter was never told: the reply was dropped")
	}
	// Its deadline passes: the waiter is settled Expired at last (a
	// request the store admitted, refused here).
	at = now + int64(2*time.Second)
	s.Tick(at)
	if v, _ := w2.Verdict(); v != protocol.Admitted {
		t.Errorf("w2 at its deadline: %v (0 Retry, 2 Expired), want Admitted", v)
	}
	// The orphan keeps its op forever: a later request on the key makes a
	// third keyState, and the orphan is swept every interval for ever.
	for i := 0; i < 10; i++ {
		at += int64(testInterval)
		s.Tick(at)
	}
	t.Logf("after the deadline: %s", s.Describe(key, lim))
}

// homeAt makes a node of a 2-node fleet the key's home: the contest is
// read at the first beat, its request asks, and the store grows it the
// whole key. It returns the Shares, the engine, the time, and the epoch.
func homeAt(t *testing.T, key string, lim limit.Limit) (*protocol.Shares, *local.Engine, int64, int64) {
	t.Helper()
	eng := newEngine(t)
	s := protocol.New(protocol.Config{Interval: testInterval, AskWait: time.Second}, eng)
	now := time.Unix(1_800_000_000, 0).UnixNano()
	us := share.Micros(now)
	epoch := us - 1000
	s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: us, Nodes: 2,
		Changes: []share.Contest{{Key: key, Limit: lim, Epoch: epoch, Expiry: us + 3_600_000_000}}}, nil, now)
	s.Tick(now)
	if _, err := eng.AllowN(now, key, lim, 1); !errors.Is(err, local.ErrShort) {
		t.Fatalf("a contested key with no grant: %v", err)
	}
	w, refuse, _ := s.Short(now, now, key, lim, 1, now+int64(time.Second), nil)
	if refuse {
		t.Fatal("refused")
	}
	ops := s.NextOps(now, 0)
	if len(ops) != 1 {
		t.Fatalf("ops %d", len(ops))
	}
	now += int64(time.Millisecond)
	us = share.Micros(now)
	s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Epoch: epoch, Grant: share.One, Growth: share.One,
		LeaseEnd: us + 1_000_000, Expiry: us + 3_600_000_000, Now: us}}, nil, false, now)
	if v, _ := w.Verdict(); v != protocol.Retry {
		t.Fatalf("verdict %v", v)
	}
	return s, eng, now, epoch
}

// A home hears a call (another node wants room) while one of its own ops
// is in flight. The call must still be answered: the node gives back what
// it spares once the op's reply is in. (Found in review: the reply made
// the key a home again and no give was queued, so the node kept renewing
// the whole key while its client used it, and at the store the crossing
// op counted as the call's answer: the caller was told there was no room.)
// The control: the same call heard with no op in flight.
func TestAHomeAnswersACallHeardWhileItsOpIsInFlight(t *testing.T) {
	for _, inFlight := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "in flight"}[inFlight], func(t *testing.T) {
			key, lim := "k", limit.PerSecond(100).WithBurst(100).Canonical()
			s, eng, now, epoch := homeAt(t, key, lim)
			reply := func(ops []share.Op, at int64) {
				rs := make([]share.Reply, len(ops))
				for i, op := range ops {
					rs[i] = share.Reply{Outcome: share.Done, Epoch: epoch, Grant: op.Keep, LeaseEnd: share.Micros(at) + 1_000_000,
						Expiry: share.Micros(at) + 3_600_000_000, Now: share.Micros(at)}
				}
				s.OpsDone(ops, rs, nil, false, at)
			}
			var callAt int64
			var gaveAt int64
			start := now
			for step := 1; step <= 100; step++ { // 2 s, a tick every 20 ms, a request every 40 ms
				now = start + int64(step)*int64(testInterval)
				if step%2 == 0 { // 25/s of 100/s
					_, _ = eng.AllowN(now, key, lim, 1)
				}
				s.Tick(now)
				ops := s.NextOps(now, 0)
				for _, op := range ops {
					if testing.Verbose() {
						t.Logf("%v op keep=%d held=%d want=%d need=%d", time.Duration(now-start), op.Keep, op.Held, op.Want, op.Need)
					}
					if callAt != 0 && op.Keep < share.One && gaveAt == 0 {
						gaveAt = now
					}
				}
				// The call: at the first renewal (in flight), or at the
				// same time with nothing in flight (control).
				if callAt == 0 && now-start >= int64(500*time.Millisecond) {
					if inFlight && len(ops) == 0 {
						continue
					}
					if !inFlight && len(ops) > 0 {
						reply(ops, now)
						ops = nil
					}
					callAt = now
					s.Heard(share.Contest{Key: key, Limit: lim, Epoch: epoch, CallAt: share.Micros(now), Expiry: share.Micros(now) + 3_600_000_000}, now)
					if !inFlight {
						for _, op := range s.NextOps(now, 0) {
							t.Logf("after the call: op keep=%d held=%d need=%d", op.Keep, op.Held, op.Need)
							if op.Keep < share.One {
								gaveAt = now
							}
							reply([]share.Op{op}, now)
						}
					}
				}
				reply(ops, now+int64(time.Millisecond))
			}
			if callAt == 0 {
				t.Fatal("no call made")
			}
			if gaveAt == 0 {
				t.Errorf("a call heard at %v never answered over the next %v: the home keeps the whole key (%s)",
					time.Duration(callAt-start), time.Duration(now-callAt), s.Describe(key, lim))
			} else {
				t.Logf("call at %v answered at %v", time.Duration(callAt-start), time.Duration(gaveAt-start))
			}
		})
	}
}

// A contest is registered quietly (no other node reads it) only when no
// node of any fleet holds an even split of its key: one request weighs more
// than half the limit. Any other contest's nodes must hear of it, to join.
func TestAContestIsRegisteredQuietlyOnlyWhereNoNodeHoldsAnEvenSplit(t *testing.T) {
	for _, tc := range []struct {
		lim   limit.Limit
		quiet bool
	}{
		{limit.PerSecond(1), true},               // burst 1: a request is the whole limit
		{limit.PerSecond(10).WithBurst(1), true}, // the same, at any rate
		{limit.PerSecond(2), false},              // a request is half: a node of two holds it
		{limit.PerSecond(10), false},             // W1's keys
		{limit.PerMinute(1).WithBurst(3), false}, // pooled in a fleet of four, not of two
		{limit.PerSecond(1).WithAlgorithm(limit.FixedWindow), true},
		{limit.PerSecond(2).WithAlgorithm(limit.FixedWindow), false},
	} {
		eng := newEngine(t)
		s := protocol.New(protocol.Config{Interval: testInterval, AskWait: time.Second}, eng)
		now := time.Unix(1_800_000_000, 0).UnixNano()
		s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: share.Micros(now), Nodes: 2}, nil, now)
		for i := 0; ; i++ { // the node's share spent: the next request is short
			if _, err := eng.AllowN(now, "k", tc.lim, 1); errors.Is(err, local.ErrShort) {
				break
			} else if i > 10 {
				t.Fatalf("%v: never short", tc.lim)
			}
		}
		w, refuse, _ := s.Short(now, now, "k", tc.lim, 1, now+int64(time.Second), nil)
		if refuse || w == nil {
			t.Fatalf("%v: refused", tc.lim)
		}
		ops := s.NextOps(now, 0)
		if len(ops) != 1 {
			t.Fatalf("%v: ops %d", tc.lim, len(ops))
		}
		us := share.Micros(now)
		s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Epoch: us, Expiry: us + 3e6, Served: 1, ServedAt: us, Now: us}}, nil, false, now)
		b := s.NextBeat(now)
		if len(b.Contests) != 1 {
			t.Fatalf("%v: the beat registers %d contests, want 1", tc.lim, len(b.Contests))
		}
		if got := b.Contests[0].Quiet; got != tc.quiet {
			t.Errorf("%v: quiet %v, want %v", tc.lim, got, tc.quiet)
		}
	}
}

// A contest is registered whatever the expiry the node last heard the
// registry hold for the key, if that was another contest's. A node that kept
// a home through a Redis restart registers the lost contest again, with its
// long expiry; the next contest of the key, made by another node, expires
// sooner, and was not registered: the node holding the home never heard of
// it, and the key had two homes. (Found in review.)
func TestANewContestIsRegisteredWhateverAnEarlierOnesExpiry(t *testing.T) {
	lim := limit.PerSecond(1).WithBurst(1).Canonical() // as the limiter passes it
	eng := newEngine(t)
	s := protocol.New(protocol.Config{Interval: testInterval, AskWait: time.Second}, eng)
	now := time.Unix(1_800_000_000, 0).UnixNano()
	us := share.Micros(now)
	s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: us, Nodes: 2}, nil, now)
	// The registry holds the earlier contest, expiring in 40 s.
	s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: us, Nodes: 2, Next: us,
		Changes: []share.Contest{{Key: "k", Limit: lim, Epoch: us - 5e6, Expiry: us + 40e6}}}, nil, now)
	if _, err := eng.AllowN(now, "k", lim, 1); !errors.Is(err, local.ErrShort) {
		t.Fatalf("a pooled key's request: %v, want short", err)
	}
	w, refuse, _ := s.Short(now, now, "k", lim, 1, now+int64(time.Second), nil)
	if refuse || w == nil {
		t.Fatal("refused")
	}
	ops := s.NextOps(now, 0)
	if len(ops) != 1 {
		t.Fatalf("ops %d", len(ops))
	}
	// The store lost it, and makes the next, expiring a little sooner.
	s.OpsDone(ops, []share.Reply{{Outcome: share.Done, Epoch: us, Grant: share.One, Growth: share.One, LeaseEnd: us + 20e6,
		Expiry: us + 39_500_000, Served: 1, ServedAt: us, Now: us, Lost: true}}, nil, false, now)
	b := s.NextBeat(now)
	if len(b.Contests) != 1 || b.Contests[0].Epoch != us {
		t.Fatalf("the beat registers %+v, want the new contest", b.Contests)
	}
}

// A node that kept 2,500 homes through a Redis restart registers their
// contests again a page a beat, not in one script that holds Redis: every
// one of them, once, over three beats.
func TestANodeRegistersItsHomesAgainAPageABeat(t *testing.T) {
	lim := limit.PerSecond(1).WithBurst(1).Canonical()
	eng := newEngine(t)
	s := protocol.New(protocol.Config{Node: "a", Interval: testInterval, AskWait: time.Second}, eng)
	now := time.Unix(1_800_000_000, 0).UnixNano()
	us := share.Micros(now)
	s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: us, Nodes: 2, New: true}, nil, now)
	const homes = 2500
	for i := range homes {
		key := "client:" + strconv.Itoa(i)
		if _, err := eng.AllowN(now, key, lim, 1); !errors.Is(err, local.ErrShort) {
			t.Fatalf("a pooled key's request: %v, want short", err)
		}
		if w, refuse, _ := s.Short(now, now, key, lim, 1, now+int64(time.Second), nil); refuse || w == nil {
			t.Fatal("refused")
		}
	}
	ops := s.NextOps(now, 0)
	if len(ops) != homes {
		t.Fatalf("ops %d", len(ops))
	}
	replies := make([]share.Reply, len(ops))
	for i := range replies {
		replies[i] = share.Reply{Outcome: share.Done, Epoch: us + int64(i), Grant: share.One, Growth: share.One,
			LeaseEnd: us + 20e6, Expiry: us + 40e6, Served: 1, ServedAt: us, Now: us}
	}
	s.OpsDone(ops, replies, nil, false, now)
	if st := s.Stats(); st.Homes != homes {
		t.Fatalf("homes %d", st.Homes)
	}
	for first := 0; first < homes; {
		b := s.NextBeat(now) // their first registrations, a page a beat
		first += len(b.Contests)
		s.BeatDone(b, &share.BeatReply{Now: us, Nodes: 2}, nil, now)
	}
	// Redis restarts empty: the node is new to the fleet, and keeps its homes.
	now += int64(testInterval)
	us = share.Micros(now)
	s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: us, Nodes: 1, New: true}, nil, now)
	seen := map[string]int{}
	var pages []int
	for range 5 {
		b := s.NextBeat(now)
		pages = append(pages, len(b.Contests))
		for _, c := range b.Contests {
			if c.Quiet {
				t.Fatalf("%s registered again quietly", c.Key)
			}
			seen[c.Key]++
		}
		s.BeatDone(b, &share.BeatReply{Now: us, Nodes: 1}, nil, now)
	}
	if !slices.Equal(pages, []int{1000, 1000, 500, 0, 0}) {
		t.Errorf("registrations a beat %v, want 1000, 1000, 500", pages)
	}
	if len(seen) != homes {
		t.Errorf("%d homes registered again, want %d", len(seen), homes)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s registered %d times", k, n)
		}
	}
}
