package async

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/share"
)

// nopStore answers nothing: the test below never lets the sender call it.
type nopStore struct{}

func (nopStore) ShareOps(context.Context, share.Settings, []share.Op, []share.Reply) error {
	return nil
}
func (nopStore) ShareBeat(context.Context, *share.Beat, *share.BeatReply) error    { return nil }
func (nopStore) SubscribeCalls(context.Context, remote.CallListener) (stop func()) { return func() {} }
func (nopStore) AddToLedgers(context.Context, []remote.LedgerEntry, []error) error { return nil }

// An ask (a request waits on it) goes at once and takes what was gathered,
// even when it comes while the sender gathers: the sender decided to
// gather when it was woken (a renewal), and before, it slept out the
// window on a timer alone, the ask's request waiting with it (up to 2 ms;
// found in review). Here the window is a minute, so that a sender that
// sleeps it out cannot pass on a loaded machine; one that goes at once for
// the ask returns within a few seconds at worst.
func TestAnAskMadeWhileTheSenderGathersGoesAtOnce(t *testing.T) {
	eng, err := local.New(local.Config{Shards: 4, MaxKeys: 1 << 16, TrackSpend: true, Asks: true})
	require.NoError(t, err)
	a, err := New(Config{Interval: 20 * time.Millisecond, AskWait: time.Second},
		Deps{Engine: eng, Store: nopStore{}, Breaker: breaker.New(breaker.Settings{}), Clock: clock.Real{}, Offset: clock.NewOffset(time.Now())})
	require.NoError(t, err)
	a.gather.wait = time.Minute
	a.lastCall.Store(time.Now().UnixNano()) // a call just began: the node is busy
	require.False(t, a.sh.Urgent(), "nothing urgent when the sender starts to gather")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan bool, 1)
	go func() { returned <- a.gatherOps(ctx) }()
	select {
	case <-returned:
		t.Fatal("the sender did not gather: nothing was urgent")
	case <-time.After(20 * time.Millisecond):
	}

	// A request the node's share cannot admit asks the fleet: Short queues
	// the ask and wakes the sender (wakeOps), as Runner.Ask does.
	now := time.Now().UnixNano()
	_, refuse, _ := a.sh.Short(now, now, "k", limit.PerSecond(100), 1, now+int64(time.Second), nil)
	require.False(t, refuse)
	require.True(t, a.sh.Urgent(), "the ask is urgent: a request waits on it")
	select {
	case ok := <-returned:
		require.True(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("an ask made while the sender gathered waited for the gather window to end")
	}
}
