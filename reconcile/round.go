package reconcile

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// RoundInfo describes one round, for metrics.
type RoundInfo struct {
	Keys     int           // keys reported (Sync) or ops sent (Async)
	Deferred int           // keys due that waited for a later round (MaxReports)
	Duration time.Duration // the round trip to Redis, or the time to fail
	Err      error         // why the round failed; nil when it succeeded
	Nodes    int           // nodes active in the fleet, as Redis answered
}

// rounds is the skeleton both modes' reconcilers share (Sync and Async): a
// round every interval, with jitter so that a fleet started together does
// not call Redis in lockstep, one at a time; the first bounded by the
// caller's deadline alone (Start); each counted and told to OnRound.
type rounds struct {
	interval time.Duration
	jitter   float64
	onRound  func(RoundInfo)

	lock     roundLock   // one round at a time (given up on when a caller's context ends)
	starting atomic.Bool // the first round: bounded by its caller's deadline, not the batch timeout

	count, errors atomic.Uint64
	last          atomic.Int64 // the last round's duration
	nodes         atomic.Int64 // the fleet's size at the last round
}

func newRounds(interval time.Duration, jitter float64, onRound func(RoundInfo)) rounds {
	if jitter == 0 {
		jitter = DefaultJitter
	}
	if jitter < 0 || jitter > 1 {
		jitter = 0
	}
	return rounds{interval: interval, jitter: jitter, onRound: onRound, lock: newRoundLock()}
}

// DefaultJitter spreads rounds by up to ±10% of the interval.
const DefaultJitter = 0.1

// loop runs round every interval, with jitter, until ctx is done.
func (r *rounds) loop(ctx context.Context, round func(context.Context)) {
	timer := time.NewTimer(r.next())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			round(ctx)
			timer.Reset(r.next())
		}
	}
}

// next is the delay before the next round.
func (r *rounds) next() time.Duration {
	d := r.interval
	if r.jitter > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * r.jitter * float64(d))
	}
	return max(d, time.Millisecond)
}

// done counts a round that ended with info and tells OnRound.
func (r *rounds) done(info RoundInfo) {
	r.count.Add(1)
	if info.Err != nil {
		r.errors.Add(1)
	} else {
		r.nodes.Store(int64(info.Nodes))
	}
	r.last.Store(int64(info.Duration))
	if r.onRound != nil {
		r.onRound(info)
	}
}

// timeout bounds a call of a round: d, or during Start what is left of
// ctx's deadline (a Redis far away at start is slow, not dead).
func (r *rounds) timeout(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok && r.starting.Load() {
		return max(time.Until(dl), time.Millisecond)
	}
	return d
}

// retry runs attempt until it succeeds, ctx ends, or (without a deadline)
// three attempts failed; between attempts it waits wait() (at least an
// interval), unless that would pass ctx's deadline. It returns the last
// attempt's error.
func (r *rounds) retry(ctx context.Context, attempt func() error, wait func() time.Duration, giveUp func(error) bool) error {
	_, bounded := ctx.Deadline()
	for n := 0; ; n++ {
		err := attempt()
		if err == nil || ctx.Err() != nil || giveUp(err) {
			return err
		}
		if !bounded {
			if n == 2 {
				return err
			}
			continue
		}
		w := max(wait(), r.interval)
		if d, _ := ctx.Deadline(); time.Until(d) < w {
			return err
		}
		t := time.NewTimer(w)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
