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

// An ask (a request waits on it) found waiting when the sender wakes goes
// at once and takes what was gathered: the sender does not gather. (One
// made while the sender gathers waits for the window's end, at most a tenth
// of the interval: waking for it went at once so often in W1, where asks
// come about every millisecond, that nothing was gathered; see gather.)
// The window here is a minute, so that a sender that gathered anyway could
// not pass on a loaded machine.
func TestAnAskWaitingWhenTheSenderWakesGoesAtOnce(t *testing.T) {
	eng, err := local.New(local.Config{Shards: 4, MaxKeys: 1 << 16, TrackSpend: true, Asks: true})
	require.NoError(t, err)
	a, err := New(Config{Interval: 20 * time.Millisecond, AskWait: time.Second},
		Deps{Engine: eng, Store: nopStore{}, Breaker: breaker.New(breaker.Settings{}), Clock: clock.Real{}, Offset: clock.NewOffset(time.Now())})
	require.NoError(t, err)
	a.gather.wait = time.Minute
	a.lastCall.Store(time.Now().UnixNano()) // a call just began: the node is busy

	// A request the node's share cannot admit asks the fleet.
	now := time.Now().UnixNano()
	_, refuse, _ := a.sh.Short(now, now, "k", limit.PerSecond(100), 1, now+int64(time.Second), nil)
	require.False(t, refuse)
	require.True(t, a.sh.Urgent(), "the ask is urgent: a request waits on it")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan bool, 1)
	go func() { returned <- a.gatherOps(ctx) }()
	select {
	case ok := <-returned:
		require.True(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("the sender gathered with an ask waiting")
	}
}
