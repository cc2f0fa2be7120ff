package protocol_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// BenchmarkTick is the protocol's timer on a node that follows many
// contested keys while requests wait on one of them: the runner calls Tick
// at every waiter's deadline and retry, not only once an interval, so what
// a Tick costs between intervals is paid many times an interval. Tick
// looked at every key on every call: with 10,000 keys 0.55-0.67 ms a call
// (1.1-1.3 µs once only the waiting keys were looked at between sweeps),
// and in make bench-keys' pinned workload the fleet spent 63% of the
// machine's two cores in it.
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			eng := newEngine(b)
			const interval = 20 * time.Millisecond
			s := protocol.New(protocol.Config{Interval: interval}, eng)
			now := time.Unix(1_800_000_000, 0).UnixNano()
			lim := limit.PerSecond(10)
			r := &share.BeatReply{Now: share.Micros(now), Nodes: 1}
			for i := range n {
				r.Changes = append(r.Changes, share.Contest{Key: fmt.Sprint("k", i), Limit: lim, Epoch: share.Micros(now), Expiry: share.Micros(now) + 3_600_000_000})
			}
			s.BeatDone(s.NextBeat(now), r, nil, now) // the first reading: every contest held, with nothing granted
			if _, refuse, _ := s.Short(now, now, "k0", lim, 1, now+int64(time.Hour), nil); refuse {
				b.Fatal("the waiting request was refused")
			}
			b.ResetTimer()
			for i := range b.N {
				s.Tick(now + int64(i)*int64(100*time.Microsecond)) // as often as a wake can come
			}
		})
	}
}
