package remote_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/share"
)

// The store publishes a call when it answers the ask that makes it
// (shares.lua), as registry.lua would publish it: the holders hear it a
// round trip sooner than through the asker's heartbeat. The asker's next
// heartbeat records it in the registry, marked published, without
// publishing it again; a node reading the registry finds it there. An op
// answered again as it was (its answer lost) publishes nothing.
func TestACallIsPublishedByTheOpThatMakesIt(t *testing.T) {
	// Keys may hold any byte: a newline, a zero byte.
	for _, key := range []string{"k", "a\nb", "a\x00b|\n"} {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			st, _, now := newFleetCase(t, "a", "b")
			lim := limit.PerHour(10)
			p, ok := share.ParamsOf(lim)
			require.True(t, ok)
			op := st.keyOps(share.Settings{Lease: 1_000_000, CallWindow: 40_000, Cooldown: 200_000, Recovery: 300_000,
				HomeLease: 20_000_000}, key, lim, 1)
			a := op(now, "a", share.Op{Held: share.One, Keep: share.One, State: p.Spent(now), Want: 1, Need: share.One})
			require.Equal(t, int64(share.One), a.Grant, "a holds the whole key, spent")
			heard := make(chan share.Contest, 4)
			stop := st.node("a").SubscribeCalls(context.Background(), remote.CallListener{Heard: func(c share.Contest) { heard <- c }})
			defer stop()
			time.Sleep(50 * time.Millisecond) // the subscription reaches Redis

			call := op(now+2_000, "b", share.Op{Epoch: a.Epoch, Want: 1})
			require.Equal(t, share.Call, call.Outcome, "b asks: a holds the key, spent, and is called: %+v", call)
			select {
			case c := <-heard:
				assert.Equal(t, share.Contest{Key: key, Limit: lim.Canonical(), Epoch: a.Epoch, CallAt: call.Now, Expiry: call.Expiry}, c,
					"the call as the registry would publish it")
			case <-time.After(time.Second):
				t.Fatal("the call the store answered was not published")
			}
			// The same op again (its answer lost): answered as it was, not
			// published again.
			again := op(now+2_500, "b", share.Op{Epoch: a.Epoch, Want: 1, At: now + 2_000, Seq: now + 2_000})
			require.Equal(t, call, again)

			c := share.Contest{Key: key, Limit: lim, Epoch: a.Epoch, CallAt: call.Now, Expiry: call.Expiry, Published: true}
			st.Beat(now+3_000, "b", share.Beat{Limit: 1000, GoneKeep: 21_000_000, Contests: []share.Contest{c}})
			select {
			case c := <-heard:
				t.Errorf("published again (the op answered again, or the registry): %+v", c)
			case <-time.After(200 * time.Millisecond):
			}
			r := st.Beat(now+4_000, "a", share.Beat{Limit: 1000, GoneKeep: 21_000_000})
			found := false
			for _, ch := range r.Changes {
				if ch.Key == key && ch.CallAt == call.Now {
					found = true
				}
			}
			assert.True(t, found, "the registry records the call for a node that reads it there: %+v", r.Changes)
		})
	}
}
