package protocol_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/share"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

func runOwnCallHeard(t *testing.T, ownFirst bool) (gives, selfCalls uint64) {
	key, lim := "k", limit.PerSecond(100)
	f := newRvFleet(t, protocol.Config{Interval: testInterval, AskWait: 50 * time.Millisecond, ActiveWindow: time.Second}, "a", "b")
	f.advance(1100 * time.Millisecond)
	send := func(n *rvNode) {
		for range 10 {
			ops := n.s.NextOps(f.now, 0)
			if len(ops) == 0 {
				return
			}
			set := n.s.Settings()
			replies := make([]share.Reply, len(ops))
			for i, op := range ops {
				replies[i] = f.store.Op(f.us(), n.id, set, op)
			}
			for i, r := range replies {
				if r.Err == nil && r.Outcome == share.Call {
					c := share.Contest{Key: ops[i].Key, Limit: ops[i].Limit.Canonical(), Epoch: r.Epoch, CallAt: r.Now, Expiry: r.Expiry}
					// shares.lua's PUBLISH reaches every subscriber: the others...
					for _, o := range f.nodes {
						if o != n {
							o.s.Heard(c, f.now)
						}
					}
					if ownFirst { // ...and the asker's own subscription, ahead of the reply
						n.s.Heard(c, f.now)
						selfCalls++
					}
				}
			}
			n.s.OpsDone(ops, replies, nil, false, f.now)
		}
	}
	for step := 0; step < 600; step++ { // 3 s, 5 ms steps: each node 200/s on a 100/s key
		f.now += int64(5 * time.Millisecond)
		for _, n := range f.nodes {
			if _, err := n.eng.AllowN(f.now, key, lim, 1); errors.Is(err, local.ErrShort) {
				n.s.Short(f.now, f.now, key, lim, 1, f.now+int64(50*time.Millisecond), nil)
			}
			n.s.Tick(f.now)
			if step%4 == 0 {
				f.beat(n)
			}
			send(n)
		}
	}
	for _, n := range f.nodes {
		gives += n.s.Stats().Gives
	}
	return gives, selfCalls
}

// The store publishes a call when it answers the ask (shares.lua), and the
// asker's own subscription may deliver it before the answer: the message
// names no node, and the node learns the call is its own only from the
// answer. Heard first, it was taken for another node's, and the asker gave
// back its share right after asking for more. Two nodes at twice a key's
// limit each, every call also heard by its asker ahead of the answer: the
// nodes give back as often as when the asker never hears its own call.
func TestAnOwnCallHeardBeforeItsAnswerIsNotAnswered(t *testing.T) {
	g0, _ := runOwnCallHeard(t, false)
	g1, self := runOwnCallHeard(t, true)
	t.Logf("gives: own call not heard %d; own call heard before its reply %d (%d calls)", g0, g1, self)
	if g1 != g0 {
		t.Errorf("hearing its own call before the reply changed what the nodes give back: %d -> %d", g0, g1)
	}
}
