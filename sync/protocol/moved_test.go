package protocol_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/share"
)

// The node's tally of its homes' fates comes back down when homes are used:
// after a spell of round-robin traffic (homes called away unused), pinned
// clients' short sessions (a home used, then left idle) make a key's first
// request ask for a home again. (Found by a hostile review: it came down
// only when a home was renewed, after half a home lease of use, so a node
// never again asked for a home with a key's first request.)
func TestHomesUsedAgainAreAskedForFirst(t *testing.T) {
	h := newHomeNode(t)
	// A spell of round-robin: five homes called away unused.
	for i := range 5 {
		key := fmt.Sprintf("rr-%d", i)
		if op := h.ask(key); op.Need != share.One {
			h.served(op)
		} else {
			h.calledAwayUnused(key, op)
		}
	}
	// Then only pinned clients, each a short session: a home made by its
	// second request, used (three requests from memory), then left.
	for i := range 20 {
		key := fmt.Sprintf("pinned-%d", i)
		first := h.ask(key)
		us := share.Micros(h.now)
		if first.Need == share.One {
			t.Logf("pinned-%d: the first request asks for a home again (recovered after %d used homes)", i, i)
			return
		}
		h.reply(first, share.Reply{Outcome: share.Done, Epoch: us, Pool: share.State{Level: int64(time.Second)}, Expiry: us + 3e6, Served: 1, ServedAt: us, Now: us})
		h.advance(time.Second)
		second := h.ask(key)
		if second.Need != share.One {
			t.Fatalf("%s: second request need %d", key, second.Need)
		}
		us = share.Micros(h.now)
		h.reply(second, share.Reply{Outcome: share.Done, Epoch: first.At, Grant: share.One, Growth: share.One,
			Pool: share.State{Level: int64(time.Second)}, LeaseEnd: us + share.Duration(testHomeLease),
			Expiry: us + 2*share.Duration(testHomeLease), Served: 1, ServedAt: us, Now: us})
		if i == 0 {
			t.Logf("pinned-0 after its second request: %+v (%s)", h.s.Stats(), h.s.Describe(key, h.lim))
		}
		for range 3 {
			h.advance(time.Second)
			if _, err := h.eng.AllowN(h.now, key, h.lim, 1); err != nil {
				t.Fatalf("%s: a request at home refused: %v", key, err)
			}
		}
		h.advance(testHomeLease/2 + time.Second) // left: given back idle
		for _, op := range h.s.NextOps(h.now, 0) {
			h.reply(op, share.Reply{Outcome: share.Done, Epoch: first.At, Now: share.Micros(h.now)})
		}
	}
	t.Fatalf("after 5 homes called away and then 20 homes used by pinned clients, the node still asks for no home with a key's first request")
}
