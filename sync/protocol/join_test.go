package protocol_test

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// A node alone decides a key in the whole limit; a second node joins, and
// the key is pooled now (one request weighs more than half the limit).
// The first node's next request asks, and its op makes the key's contest.
// The contest's pool started full, whatever the node had admitted alone:
// the store made the node the key's home in it, and a key of 2 per 10 s,
// burst 1, admitted 2 within a second (the simulation's seed 951286, 18
// keys over the bound). The pool now starts at the creator's shadow: what
// one bucket of the whole limit holds after the node's own admissions.
func TestAPooledKeysContestStartsAtItsCreatorsSpend(t *testing.T) {
	lim := limit.Per(2, 10*time.Second).WithBurst(1)
	f := newRvFleet(t, protocol.Config{Interval: testInterval, AskWait: time.Second, ActiveWindow: time.Second}, "a")
	a := f.nodes[0]
	f.advance(1100 * time.Millisecond)
	if !f.request(a, "k", lim) {
		t.Fatal("the node alone: its first request refused")
	}
	f.add("b")
	f.advance(3 * testInterval) // a reads the fleet of two: the key is pooled
	if st := a.s.Stats(); st.Nodes != 2 {
		t.Fatalf("a sees %d nodes", st.Nodes)
	}
	if f.request(a, "k", lim) {
		t.Errorf("a second request within the refill time (5 s) admitted: the contest's pool started full")
	}
}

// The same key, but the node that joins asks first: its op makes the
// contest, and it knows nothing of what the first node admitted alone. Its
// pool started full, and the fleet admitted 2 within a second under a limit
// of 2 per 10 s, burst 1 (the simulation's seed 951286, 9 keys over the
// bound). Now the first node, told the fleet grew and the key is pooled,
// reports what it admitted alone: its report makes the contest, at its
// shadow, before the new node's first request.
func TestAPooledKeysContestStartsAtTheSpendOfTheNodeThatDecidedItAlone(t *testing.T) {
	lim := limit.Per(2, 10*time.Second).WithBurst(1)
	f := newRvFleet(t, protocol.Config{Interval: testInterval, AskWait: time.Second, ActiveWindow: time.Second}, "a")
	a := f.nodes[0]
	f.advance(1100 * time.Millisecond)
	if !f.request(a, "k", lim) {
		t.Fatal("the node alone: its first request refused")
	}
	b := f.add("b")
	f.advance(3 * testInterval) // both read the fleet of two: the key is pooled
	if st := a.s.Stats(); st.Nodes != 2 {
		t.Fatalf("a sees %d nodes", st.Nodes)
	}
	if f.request(b, "k", lim) {
		t.Errorf("the new node's first request within the refill time (5 s) admitted: its contest's pool started full")
	}
}

// A key the node decided alone but whose bucket has refilled since is not
// reported: nothing of it is spent, and the new node's first request is
// admitted, as an exact limiter would.
func TestAPooledKeysContestStartsFullWhenItsEarlierSpendRefilled(t *testing.T) {
	lim := limit.Per(2, 10*time.Second).WithBurst(1)
	f := newRvFleet(t, protocol.Config{Interval: testInterval, AskWait: time.Second, ActiveWindow: time.Second}, "a")
	a := f.nodes[0]
	f.advance(1100 * time.Millisecond)
	if !f.request(a, "k", lim) {
		t.Fatal("the node alone: its first request refused")
	}
	f.advance(6 * time.Second) // refilled: 1 every 5 s
	ops := f.ops()
	b := f.add("b")
	f.advance(3 * testInterval)
	if n := f.ops() - ops; n != 0 {
		t.Errorf("%d ops for a refilled key when the fleet grew", n)
	}
	if !f.request(b, "k", lim) {
		t.Errorf("the new node's first request refused: the key had refilled")
	}
}
