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
