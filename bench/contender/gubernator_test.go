package contender

import (
	"context"
	"testing"
	"time"
)

// One Gubernator cluster: the default behaviour holds one limit across the
// daemons; GLOBAL answers a sticky burst from the daemon's own copy, whole.
func TestGubernator(t *testing.T) {
	g, err := StartGubernator(4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	if _, err := StartGubernator(4); err == nil {
		t.Error("a second cluster in the same process started")
	}
	ctx := context.Background()

	t.Run("default: one limit across the daemons", func(t *testing.T) {
		nodes := make([]Limiter, g.Nodes())
		for i := range nodes {
			nodes[i] = g.Node(i, "default", testPolicy, false)
		}
		start := time.Now()
		admitted := int64(0)
		for i := range 4 * testPolicy.Burst {
			ok, err := nodes[i%int64(len(nodes))].Allow(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				admitted++
			}
		}
		// The burst, and what the limit refilled while the requests were sent.
		most := testPolicy.Burst + int64(time.Since(start).Seconds()*float64(testPolicy.Rate))
		if admitted < testPolicy.Burst || admitted > most {
			t.Fatalf("admitted %d of %d spread over %d daemons, want %d to %d", admitted, 4*testPolicy.Burst, len(nodes), testPolicy.Burst, most)
		}
	})

	t.Run("GLOBAL: a sticky burst on a daemon that does not own the key", func(t *testing.T) {
		owner, err := g.Owner("global", "k")
		if err != nil {
			t.Fatal(err)
		}
		n := g.Node((owner+1)%g.Nodes(), "global", testPolicy, true)
		for i := range testPolicy.Burst {
			ok, err := n.Allow(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				t.Fatalf("request %d of a burst of %d refused", i+1, testPolicy.Burst)
			}
		}
	})
}
