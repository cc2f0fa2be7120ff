package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/share"
)

// The store publishes a call when it answers the ask that makes it
// (shares.lua), as registry.lua would publish it: the holders hear it a
// round trip sooner than through the asker's heartbeat. The asker's next
// heartbeat records it in the registry, marked published, without
// publishing it again; a node reading the registry finds it there.
func TestACallIsPublishedByTheOpThatMakesIt(t *testing.T) {
	st, _, now, lim, _, op, a := aHoldsTheKeySpent(t)
	heard := make(chan share.Contest, 4)
	stop := st.node("a").SubscribeCalls(context.Background(), remote.CallListener{Heard: func(c share.Contest) { heard <- c }})
	defer stop()
	time.Sleep(50 * time.Millisecond) // the subscription reaches Redis

	call := op(now+2_000, "b", share.Op{Epoch: a.Epoch, Want: 1})
	require.Equal(t, share.Call, call.Outcome, "b asks: a holds the key, spent, and is called: %+v", call)
	select {
	case c := <-heard:
		assert.Equal(t, share.Contest{Key: "k", Limit: lim.Canonical(), Epoch: a.Epoch, CallAt: call.Now, Expiry: call.Expiry}, c,
			"the call as the registry would publish it")
	case <-time.After(time.Second):
		t.Fatal("the call the store answered was not published")
	}

	c := share.Contest{Key: "k", Limit: lim, Epoch: a.Epoch, CallAt: call.Now, Expiry: call.Expiry, Published: true}
	st.Beat(now+3_000, "b", share.Beat{Limit: 1000, GoneKeep: 21_000_000, Contests: []share.Contest{c}})
	select {
	case c := <-heard:
		t.Errorf("the registry published again a call the store had published: %+v", c)
	case <-time.After(200 * time.Millisecond):
	}
	r := st.Beat(now+4_000, "a", share.Beat{Limit: 1000, GoneKeep: 21_000_000})
	found := false
	for _, ch := range r.Changes {
		if ch.Key == "k" && ch.CallAt == call.Now {
			found = true
		}
	}
	assert.True(t, found, "the registry records the call for a node that reads it there: %+v", r.Changes)
}
