package protocol_test

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/share"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// A node that leaves (Close: Leave, then send until Holding is 0) gives
// back every grant, also one an op in flight when it left brings in. The
// case found under load: a key's first ask (the key still even here, its
// contest not begun) failed on a slow Redis and waited to be sent again
// when the node left. Leave queued nothing for an even key; the ask, sent
// again, made the contest and granted the node a share; and nothing gave
// it back: Flush retried until its deadline ("1 keys still hold a share"),
// and the fleet counted the share held until its lease ran out.
func TestALeaveGivesBackAGrantAnOpInFlightBringsIn(t *testing.T) {
	for _, failed := range []bool{false, true} {
		name := map[bool]string{false: "in flight", true: "failed, to send again"}[failed]
		t.Run(name, func(t *testing.T) {
			// A pooled key (one request weighs more than an even split):
			// its first request here asks, and the store makes this node
			// its home, granting it the whole key.
			key, lim := "k", limit.PerSecond(1)
			f := newRvFleet(t, protocol.Config{Interval: testInterval, AskWait: time.Second, ActiveWindow: time.Second}, "a", "b")
			a := f.nodes[0]
			f.advance(1100 * time.Millisecond) // past the first active window
			if _, err := a.eng.AllowN(f.now, key, lim, 1); err != local.ErrShort {
				t.Fatalf("the key's first request: %v, want short", err)
			}
			w, refuse, _ := a.s.Short(f.now, f.now, key, lim, 1, f.now+int64(time.Second), nil)
			if refuse || w == nil {
				t.Fatal("refused")
			}
			ops := a.s.NextOps(f.now, 0) // the key's first ask, on its way
			if len(ops) != 1 || ops[0].Epoch != 0 {
				t.Fatalf("ops %+v, want one ask of an even key", ops)
			}
			if failed {
				a.s.OpsDone(ops, nil, errCut, false, f.now)
				a.s.Leave()
				ops = a.s.NextOps(f.now, 0) // sent again as it was
				if len(ops) != 1 {
					t.Fatalf("ops %+v, want the ask again", ops)
				}
			} else {
				a.s.Leave()
			}
			set := a.s.Settings()
			r := f.store.Op(f.us(), a.id, set, ops[0])
			a.s.OpsDone(ops, []share.Reply{r}, nil, false, f.now)
			if r.Grant <= 0 {
				t.Fatalf("the ask granted nothing (%+v): the case needs a grant", r)
			}
			f.send(a) // what Flush does until nothing is held
			if h := a.s.Holding(); h != 0 {
				t.Errorf("after leaving: %d keys still hold a share (%s)", h, a.s.Describe(key, lim))
			}
			// A request short after the node left (a decision racing
			// Close) is refused, and asks for nothing.
			if _, refuse, _ := a.s.Short(f.now, f.now, key, lim, 1, f.now+int64(time.Second), nil); !refuse {
				t.Error("a request short after Leave waits on an ask")
			}
			if ops := a.s.NextOps(f.now, 0); len(ops) != 0 {
				t.Errorf("ops after Leave: %+v", ops)
			}
		})
	}
}
