package async

import (
	"errors"
	"sync"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/remote"
)

// batch sizes a node's calls to Redis so that each finishes well within
// its timeout. A call's time is a round trip plus what it carries (a
// shares.lua op costs Redis 10-90 µs, more on a loaded machine), and a call
// that outlasts its timeout is abandoned, counted a failure, and sent again
// whole: a backlog larger than the timeout allows (a node that leaves with
// thousands of grants, the ops owed after an outage) timed out for ever and
// kept the breaker open. So the size follows what the calls took:
//   - a call of about the size (at least half of it) that timed out
//     shrinks it to a quarter of what it carried: the breaker opens after
//     three failures in a row, so the size must fit within two;
//   - the ops of a call may take half of what the round trip leaves of the
//     timeout (the budget): a call of about the size that answered but
//     took the round trip and more than one and a half budgets shrinks it
//     to what would take one budget, at the pace its ops ran;
//   - a call of about the size that answered within the round trip and one
//     budget lets it grow, up to twice, to what would take one budget,
//     never above the most (Config.BatchSize).
//
// The round trip is not the ops' cost: it is what calls of a few ops take,
// and the node's heartbeats when they carry a few entries (a moving
// average; any faster call lowers it: a node at rest sends no ops but
// beats, so the round trip follows a route that grew before a backlog
// comes), and a call whose time is
// mostly the round trip never shrinks the size, so a distant Redis's calls
// are not made smaller for it. A small call says little of a large one's
// time, so it changes nothing else: a stall that times out a lone op leaves
// the size, and a size that shrank grows back as the next backlog's calls
// answer in time. Other failures (the breaker open, a connection refused)
// say nothing of the size and leave it.
type batch struct {
	most int

	mu   sync.Mutex
	size int
	trip time.Duration // the round trip, as calls of a few ops take it
}

// fewOps is the most ops a call may carry to measure the round trip.
const fewOps = 4

func newBatch(most int) *batch { return &batch{most: most, size: most} }

// roundTrip tells b of a call that was all but its round trip (a heartbeat
// carrying a few entries), which took took.
func (b *batch) roundTrip(took time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sawTrip(took, true)
}

// sawTrip folds took into the round trip: any call faster than it lowers
// it, and one of a few ops (few) moves it a quarter of the way. b.mu is
// held.
func (b *batch) sawTrip(took time.Duration, few bool) {
	switch {
	case b.trip == 0 || took < b.trip:
		b.trip = took
	case few:
		b.trip += (took - b.trip) / 4
	}
}

// next returns how many a call may carry now.
func (b *batch) next() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size
}

// done tells b how a call of n went: how long it took, its timeout, and its
// error.
func (b *batch) done(n int, took, timeout time.Duration, err error) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	large := 2*n >= b.size
	switch {
	case errors.Is(err, breaker.ErrTimeout) || errors.Is(err, remote.ErrTimeout):
		if large {
			b.size = max(n/4, 1)
		}
		return
	case err != nil:
		return
	}
	b.sawTrip(took, n <= fewOps)
	if !large {
		return
	}
	work := took - b.trip            // what the ops took beyond the round trip
	budget := (timeout - b.trip) / 2 // what they may take: half of what the round trip leaves
	if budget <= 0 {
		return // the round trip alone outlasts the timeout: no size helps
	}
	target := b.most
	if work > 0 {
		target = int(min(float64(n)*float64(budget)/float64(work), float64(b.most)))
	}
	switch {
	case took <= b.trip+budget:
		b.size = min(max(b.size, min(2*b.size, target)), b.most)
	case took > b.trip+budget*3/2 && 2*work > took:
		b.size = max(min(b.size, target), 1)
	}
}
