package remote

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// A node's first heartbeat is published with the fleet's size, so that the
// others divide by the larger fleet at once (a node at rest beats only
// every 200 ms); its later beats are not, and a published call still
// reaches heard, not joined.
func TestAJoinIsPublished(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	stores := make([]*Store, 3)
	for i := range stores {
		s, err := New(c, Options{Prefix: "join:", Node: string(rune('a' + i))})
		require.NoError(t, err)
		stores[i] = s
	}
	ctx := context.Background()
	type join struct {
		nodes  int
		at     int64
		member string
	}
	joins := make(chan join, 16)
	calls := make(chan share.Contest, 16)
	stop := stores[0].SubscribeCalls(ctx, CallListener{Heard: func(c share.Contest) { calls <- c },
		Joined: func(nodes int, at int64, member string) { joins <- join{nodes, at, member} }})
	defer stop()
	time.Sleep(50 * time.Millisecond) // the subscription reaches Redis

	beat := func(s *Store, b share.Beat) share.BeatReply {
		var r share.BeatReply
		require.NoError(t, s.ShareBeat(ctx, &b, &r))
		return r
	}
	next := func() (join, bool) {
		select {
		case j := <-joins:
			return j, true
		case <-time.After(time.Second):
			return join{}, false
		}
	}
	for i, s := range stores {
		r := beat(s, share.Beat{Limit: 10})
		require.True(t, r.New, "node %d's first beat", i)
		j, ok := next()
		if assert.True(t, ok, "node %d's join heard", i) {
			assert.Equal(t, i+1, j.nodes, "the fleet's size as node %d joined", i)
			assert.Equal(t, r.Now, j.at, "the store's time of the join")
			assert.Equal(t, s.Node(), j.member, "the node that joined")
		}
	}
	// Beats of nodes already in the fleet, and a call: no join.
	beat(stores[1], share.Beat{Limit: 10})
	beat(stores[2], share.Beat{Limit: 10, Contests: []share.Contest{{Key: "k", Limit: limit.PerSecond(10), Epoch: 1, CallAt: 2, Expiry: 1 << 60}}})
	select {
	case c := <-calls:
		assert.Equal(t, "k", c.Key)
	case <-time.After(time.Second):
		t.Error("the call was not heard")
	}
	select {
	case j := <-joins:
		t.Errorf("a join published for a node already in the fleet: %+v", j)
	case <-time.After(100 * time.Millisecond):
	}
}

// The subscription is confirmed at first, and again after its connection
// dropped and go-redis made it again: the node then knows what was
// published meanwhile was lost, and reads the registry.
func TestASubscriptionMadeAgainIsTold(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s, err := New(c, Options{Prefix: "resub:"})
	require.NoError(t, err)
	subscribed := make(chan struct{}, 4)
	stop := s.SubscribeCalls(context.Background(), CallListener{Subscribed: func() { subscribed <- struct{}{} }})
	defer stop()
	wait := func(what string) {
		t.Helper()
		select {
		case <-subscribed:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the subscription was not confirmed", what)
		}
	}
	wait("at first")
	admin := srv.Client(t)
	require.NoError(t, admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err())
	wait("after its connection was killed")
}

// A published join names the node that joined; an earlier release's names
// none, and is still read.
func TestParseJoined(t *testing.T) {
	for _, tc := range []struct {
		payload string
		nodes   int
		at      int64
		member  string
		ok      bool
	}{
		{"3\n1800000000000000\nnode-a", 3, 1800000000000000, "node-a", true},
		{"3\n1800000000000000\nnode\nwith\nlines", 3, 1800000000000000, "node\nwith\nlines", true},
		{"2\n1800000000000000", 2, 1800000000000000, "", true},
		{"0\n1800000000000000\na", 0, 0, "", false},
		{"x\n1\na", 0, 0, "", false},
		{"3", 0, 0, "", false},
	} {
		nodes, at, member, ok := parseJoined(tc.payload)
		assert.Equal(t, tc.ok, ok, "%q", tc.payload)
		if tc.ok {
			assert.Equal(t, tc.nodes, nodes, "%q", tc.payload)
			assert.Equal(t, tc.at, at, "%q", tc.payload)
			assert.Equal(t, tc.member, member, "%q", tc.payload)
		}
	}
}
