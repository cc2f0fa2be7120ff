// Package round is the skeleton both of a node's reconcilers share (Sync
// mode's spend reports, package reports; Async mode's share protocol runner,
// package async): a round every interval, with jitter so that a fleet
// started together does not call Redis in lockstep, one round at a time;
// the first bounded by the caller's deadline alone; each counted and told
// to the limiter's OnRound; and the counters both report (Stats).
package round

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// DefaultInterval is the time between rounds when a reconciler's Interval
// is zero.
const DefaultInterval = protocol.DefaultInterval

// Defaults both reconcilers' configurations share.
const (
	// DefaultBatchSize is the most keys one call to Redis carries.
	DefaultBatchSize = 2000
	// DefaultMaxPending bounds the keys whose counts a node keeps while
	// Redis has not acknowledged them.
	DefaultMaxPending = 1 << 20
)

// DefaultJitter spreads rounds by up to ±10% of the interval.
const DefaultJitter = 0.1

// Info describes one round, for metrics.
type Info struct {
	Keys     int           // keys reported (Sync) or ops sent (Async)
	Deferred int           // keys due that waited for a later round (MaxReports)
	Duration time.Duration // the round trip to Redis, or the time to fail
	Err      error         // why the round failed; nil when it succeeded
	Nodes    int           // nodes active in the fleet, as Redis answered
}

// Stats is a snapshot of a reconciler's counters.
type Stats struct {
	Rounds, RoundErrors uint64        // rounds run, and those that failed
	KeysSent            uint64        // reports (Sync) or ops (Async) sent in successful rounds
	Deferred            uint64        // reports due that waited for a later round
	LostSpend           uint64        // weight dropped: a bound hit, or a key Redis refuses
	StateLost           uint64        // keys Redis had lost state of (evicted, deleted, restarted empty), restored
	KeyFaults           uint64        // reports Redis refused for the key itself (a key of another type)
	PendingDropped      uint64        // Sync: weight dropped because pending spend reached MaxPendingBytes (also in LostSpend)
	PendingBytes        uint64        // Sync: the memory pending spend takes, as estimated against MaxPendingBytes
	UncertainForced     uint64        // Sync: timed-out decisions let go unreported after 65,536 later ones (may count twice)
	Leases              int           // keys whose share Redis granted under a live lease
	Pending             int           // keys with spend Redis has not acknowledged, as of a recent round
	Nodes               int           // nodes in the fleet at the last round (Async: the most seen within the active window)
	LastRound           time.Duration // the last round's duration
	// Shares are the share protocol's counters (Async).
	Shares protocol.Stats
}

// Runner is the round skeleton a reconciler embeds. The zero value is not
// usable: call New.
type Runner struct {
	interval time.Duration
	jitter   float64
	onRound  func(Info)

	// Lock holds one round at a time (given up on when a caller's context
	// ends).
	Lock Lock
	// Starting is set during the first round: it is bounded by its
	// caller's deadline, not the batch timeout.
	Starting atomic.Bool

	count, errors atomic.Uint64
	last          atomic.Int64 // the last round's duration
	nodes         atomic.Int64 // the fleet's size at the last round
}

// New returns a Runner of rounds every interval, spread by jitter (zero:
// DefaultJitter; outside [0, 1]: none), each told to onRound if not nil.
func New(interval time.Duration, jitter float64, onRound func(Info)) Runner {
	if jitter == 0 {
		jitter = DefaultJitter
	}
	if jitter < 0 || jitter > 1 {
		jitter = 0
	}
	return Runner{interval: interval, jitter: jitter, onRound: onRound, Lock: NewLock()}
}

// Interval returns the time between rounds.
func (r *Runner) Interval() time.Duration { return r.interval }

// Loop runs round every interval, with jitter, until ctx is done.
func (r *Runner) Loop(ctx context.Context, round func(context.Context)) {
	timer := time.NewTimer(r.Next())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			round(ctx)
			timer.Reset(r.Next())
		}
	}
}

// Next is the delay before the next round.
func (r *Runner) Next() time.Duration {
	d := r.interval
	if r.jitter > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * r.jitter * float64(d))
	}
	return max(d, time.Millisecond)
}

// Done counts a round that ended with info and tells OnRound.
func (r *Runner) Done(info Info) {
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

// Rounds returns the rounds run, and those that failed.
func (r *Runner) Rounds() (rounds, failed uint64) { return r.count.Load(), r.errors.Load() }

// Last returns the last round's duration.
func (r *Runner) Last() time.Duration { return time.Duration(r.last.Load()) }

// Nodes returns the fleet's size at the last round that succeeded.
func (r *Runner) Nodes() int { return int(r.nodes.Load()) }

// Timeout bounds a call of a round: d, or during the first round what is
// left of ctx's deadline (a Redis far away at start is slow, not dead).
func (r *Runner) Timeout(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok && r.Starting.Load() {
		return max(time.Until(dl), time.Millisecond)
	}
	return d
}

// Retry runs attempt until it succeeds, ctx ends, giveUp says so, or
// (without a deadline) three attempts failed; between attempts it waits
// wait() (at least an interval), unless that would pass ctx's deadline. It
// returns the last attempt's error.
func (r *Runner) Retry(ctx context.Context, attempt func() error, wait func() time.Duration, giveUp func(error) bool) error {
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
