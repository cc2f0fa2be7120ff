package async

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/remote"
)

// batch sizes a node's calls to Redis so that each finishes well within
// its timeout. A call's time grows with what it carries (a shares.lua op
// costs Redis 10-90 µs, more on a loaded machine), and a call that
// outlasts its timeout is abandoned, counted a failure, and sent again
// whole: a backlog larger than the timeout allows (a node that leaves with
// thousands of grants, the ops owed after an outage) timed out for ever and
// kept the breaker open. So the size follows what the calls took:
//   - a call that timed out halves the next;
//   - a call that answered sizes the next to take a quarter of the timeout
//     at the pace it ran, at most twice as large as the last size, never
//     above the most (Config.BatchSize); a call of less than half the size
//     (fewer were ready) may grow it, not shrink it: its time is mostly the
//     round trip.
//
// Other failures (the breaker open, a connection refused) say nothing of
// the size and leave it.
type batch struct {
	most int
	size atomic.Int64
}

func newBatch(most int) *batch {
	b := &batch{most: most}
	b.size.Store(int64(most))
	return b
}

// next returns how many a call may carry now.
func (b *batch) next() int { return int(b.size.Load()) }

// done tells b how a call of n went: how long it took, its timeout, and its
// error.
func (b *batch) done(n int, took, timeout time.Duration, err error) {
	size := b.size.Load()
	switch {
	case n <= 0:
		return
	case errors.Is(err, breaker.ErrTimeout) || errors.Is(err, remote.ErrTimeout):
		b.size.Store(max(min(size, int64(n))/2, 1))
	case err != nil:
	default:
		target := int64(b.most)
		if took > 0 {
			target = int64(float64(n) * float64(timeout/4) / float64(took))
		}
		if target < size && 2*int64(n) < size {
			return // a small call's time is mostly the round trip
		}
		b.size.Store(min(max(target, 1), 2*size, int64(b.most)))
	}
}
