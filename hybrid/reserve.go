package hybrid

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/sync/async"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// InfDuration is what Reservation.DelayFrom returns for a reservation that
// was not made, as golang.org/x/time/rate's.
const InfDuration = time.Duration(math.MaxInt64)

// Reservation is the outcome of Reserve and ReserveN: a request admitted
// now or later, with golang.org/x/time/rate's semantics and methods. OK
// (or Allowed) reports whether it was made; Delay and DelayFrom say how
// long the holder must still wait before acting; Cancel gives it back if
// the holder will not act.
//
// The Decision holds the key's state after the reservation: Remaining,
// ResetAfter, and when it was not made, RetryAfter (when a reservation of
// the same weight would be made). The zero Reservation is one that was not
// made. A Reservation is safe for concurrent use.
type Reservation struct {
	Decision

	delay    time.Duration // the wait from when it was made; zero if not made
	pooled   bool          // Async: the fleet's pool admitted it, not this node's share
	eta      time.Duration // refused: how long it would have waited to act, had it been made
	l        *Limiter
	key      string
	lim      Limit
	n        int64
	at       int64 // when it was made, Unix ns on the deciding clock
	canceled atomic.Bool
}

// made records res, a reservation made (or refused) with src after being
// offered a wait of at most offered.
func (r *Reservation) made(res limit.Reservation, src Source, offered time.Duration) {
	r.Decision, r.delay, r.at = Decision{Result: res.Result, Source: src}, res.Delay, res.At
	switch {
	case res.Allowed:
	case r.lim.Algorithm == TokenBucket:
		r.eta = res.RetryAfter + offered // RetryAfter is the wait beyond what was offered
	default:
		r.eta = res.ResetAfter // the leaky queue's wait: a refusal leaves it as it was
	}
}

// OK reports whether the reservation was made: Allowed.
func (r *Reservation) OK() bool { return r.Allowed }

// Delay is shorthand for DelayFrom(Limiter.Now()): how long the holder must
// still wait before acting, zero when it may act now, InfDuration when the
// reservation was not made. As x/time/rate's Delay reads time.Now, this
// reads the limiter's clock.
func (r *Reservation) Delay() time.Duration {
	if r.l == nil {
		// No limiter, no clock (the Reservation of a call that failed, or
		// one built by hand): InfDuration if not made, else zero.
		return r.DelayFrom(time.Unix(0, r.at+int64(r.delay)))
	}
	return r.DelayFrom(r.l.Now())
}

// TimeToAct returns when the holder may act, on the limiter's clock
// (Limiter.Now, aligned to Redis server TIME). The zero Time for a
// reservation that was not made.
func (r *Reservation) TimeToAct() time.Time {
	if !r.Allowed {
		return time.Time{}
	}
	return time.Unix(0, r.at+int64(r.delay))
}

// DelayFrom returns how long the holder must still wait at t, a time on the
// limiter's clock (Limiter.Now): zero when it may act, InfDuration when the
// reservation was not made.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.Allowed {
		return InfDuration
	}
	return max(time.Duration(r.at+int64(r.delay)-t.UnixNano()), 0)
}

// Cancel tells the limiter that the holder will not act, and gives back as
// much of the reservation as x/time/rate's Reservation.Cancel does: nothing
// once it could act, else its tokens less those that reservations made
// after it already count on. So a request queued behind a cancelled one
// never shares its slot with one made after the cancel.
//
// Cancel gives back once: a second call, or a call on a reservation that
// was not made, does nothing. A reservation made in Redis (Source Remote)
// is given back in Redis, bounded by ctx; if Redis cannot be reached it
// stays counted and Cancel returns why. One made in memory is given back in
// memory (in Async mode, to the share it was made in); spend already
// reported to Redis stays counted there. One the fleet's pool admitted in
// Async mode (a key no node held room of) acted at once: nothing is left to
// give back.
func (r *Reservation) Cancel(ctx context.Context) error {
	if !r.Allowed || r.l == nil || !r.canceled.CompareAndSwap(false, true) {
		return nil
	}
	l := r.l
	if l.closed.Load() {
		return ErrClosed
	}
	if r.pooled {
		return nil
	}
	act := r.at + int64(r.delay)
	if r.Source != Remote {
		_, err := l.engine.CancelN(l.now(), r.key, r.lim, r.n, act)
		return err
	}
	if l.breaker.State() == breaker.Open {
		return fmt.Errorf("hybrid: cancel %q: %w: the reservation stays counted", r.key, remote.ErrUnavailable)
	}
	_, err := breaker.Call(ctx, l.breaker, 0, func(ctx context.Context) (remote.Decision, error) {
		_, d, err := l.store.CancelN(ctx, r.key, r.lim, r.n, act)
		return d, err
	})
	if err != nil {
		return fmt.Errorf("hybrid: cancel %q: %w", r.key, err)
	}
	return nil
}

// Reserve is shorthand for ReserveN(ctx, key, lim, 1).
func (l *Limiter) Reserve(ctx context.Context, key string, lim Limit) (*Reservation, error) {
	return l.ReserveN(ctx, key, lim, 1)
}

// ReserveN reserves a request of weight n for key under lim and says how
// long the holder must wait before acting (Reservation.Delay), with
// golang.org/x/time/rate's semantics:
//
//   - on the token bucket the request is admitted now or later: the bucket
//     goes into debt and the Delay is how long its tokens take to refill;
//   - on the leaky bucket it takes a place in the queue, which holds Burst
//     requests: the Delay is how long the requests ahead of it take to
//     drain, and a full queue refuses it (RetryAfter says when a place
//     frees up).
//
// A reservation is refused, too, when it would wait longer than
// limit.MaxSpan (about 52 days), or, when it is made in this node's memory
// while a Redis mode runs (Async, or degraded), longer than one burst
// tolerance (Burst×Period/Rate): that is the most debt the fleet's
// reconciliation carries, and memory must not promise a wait that Redis
// would forget. A refused reservation spends nothing.
//
// Where it is made follows AllowN: in memory in LocalOnly and Async mode,
// in Redis (one script) in Sync mode, in memory under the Fallback while
// degraded (FailOpen admits at once, FailClosed refuses until the breaker's
// next probe). The window algorithms cannot reserve (ErrUnsupported).
//
// An error is the caller's mistake, as for AllowN: n above the burst
// (ErrExceedsCapacity), an invalid key or limit, a window algorithm, a
// closed limiter. ReserveN never returns a nil Reservation: with an error
// it returns one that is not OK, with a zero Decision. So code written for
// x/time/rate, whose ReserveN answers n above the burst with a Reservation
// that is not OK (and no error), sees the refusal in OK as well.
func (l *Limiter) ReserveN(ctx context.Context, key string, lim Limit, n int64) (*Reservation, error) {
	r, err := l.reserve(ctx, key, lim, n, limit.MaxSpan)
	if err != nil {
		return &Reservation{}, err
	}
	return r, nil
}

// reserve is ReserveN with the longest wait admitted.
func (l *Limiter) reserve(ctx context.Context, key string, lim Limit, n int64, maxWait time.Duration) (*Reservation, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if !lim.Algorithm.IsBucket() {
		return nil, fmt.Errorf("%w: reserve needs the token or leaky bucket, not %v", ErrUnsupported, lim.Algorithm)
	}
	lim = lim.Canonical()
	r := &Reservation{l: l, key: key, lim: lim, n: n}
	if l.mode == Sync && l.breaker.State() != breaker.Open {
		// The call may outlive this one on a goroutine the breaker abandons:
		// it gets values of its own.
		redisWait := maxWait
		d, err := breaker.Call(ctx, l.breaker, 0, func(ctx context.Context) (remote.Decision, error) {
			l.countCall(ctx)
			return l.store.ReserveN(ctx, key, lim, n, redisWait)
		})
		if err == nil {
			l.keepWarm(key, lim, d)
			r.made(limit.Reservation{Result: d.Result, Delay: d.Delay, At: d.Now}, Remote, redisWait)
			return r, nil
		}
		if isCallerError(err) {
			return nil, err
		}
		if remote.IsKeyFault(err) {
			l.keyFault(key, err)
		}
	}
	if l.mode == LocalOnly {
		res, err := l.engine.ReserveN(l.now(), key, lim, n, maxWait)
		if err != nil {
			return nil, err
		}
		r.made(res, Local, maxWait)
		return r, nil
	}
	// In memory, in a mode with Redis: no promise the reconciliation would
	// forget.
	maxWait = min(maxWait, memoryWait(lim))
	if l.mode == Sync || l.engine.Degraded() {
		return l.degradedReserve(r, maxWait)
	}
	return l.asyncReserve(ctx, r, maxWait)
}

// asyncReserve reserves in Async mode, through the share protocol as AllowN
// decides: in this node's share when it holds the room at once; otherwise
// it asks the fleet first (at most AskWait, as a request of AllowN waits),
// and then the fleet's pool admits it, or it is made in the share the node
// holds now, waiting as that share refills. A node that holds no share of
// the key refuses it until the fleet has room (RetryAfter), and WaitN tries
// again then.
func (l *Limiter) asyncReserve(ctx context.Context, r *Reservation, maxWait time.Duration) (*Reservation, error) {
	if err := asyncSupports(&r.lim); err != nil {
		return nil, err
	}
	now := l.now()
	res, err := l.engine.ReserveN(now, r.key, r.lim, r.n, maxWait)
	switch {
	case err == nil:
		r.made(res, Local, maxWait)
		return r, nil
	case errors.Is(err, local.ErrFaulted):
		return l.degradedReserve(r, maxWait) // Redis refuses this key: the fallback decides it
	case !errors.Is(err, local.ErrShort):
		return nil, err
	}
	deadline := now + int64(l.async.AskWait())
	if d, ok := ctx.Deadline(); ok {
		deadline = min(deadline, now+int64(time.Until(d)))
	}
	ans, made, err := l.askReserve(ctx, now, r, maxWait, deadline)
	switch {
	case err != nil:
		return nil, err
	case ans.Verdict == protocol.Unreachable:
		return l.degradedReserve(r, maxWait)
	case ans.Verdict == protocol.Admitted:
		// The fleet's pool admitted it, at once: the node's own state is
		// as it was.
		res, _ := l.engine.AllowN(l.now(), r.key, r.lim, 0)
		res.Limit, res.Allowed, res.RetryAfter = r.lim, true, 0
		r.Decision, r.at, r.pooled = Decision{Result: res, Source: Remote}, l.now(), true
		return r, nil
	case made != nil:
		r.made(*made, Local, maxWait)
		return r, nil
	}
	now = l.now()
	held, err := l.engine.ReserveHeld(now, r.key, r.lim, r.n, maxWait)
	switch {
	case err == nil:
		r.made(held, Local, maxWait)
		return r, nil
	case errors.Is(err, local.ErrFaulted):
		return l.degradedReserve(r, maxWait)
	case !errors.Is(err, local.ErrShort):
		return nil, err
	}
	// This node holds no share that could make it, and the fleet had no
	// room for it: refused until the fleet may have (or, not knowing when,
	// an interval).
	ref, err := l.refuse(now, r.key, r.lim, r.n, ans.Until, true)
	if err != nil {
		return nil, err
	}
	if ans.Verdict != protocol.Refuse || ans.Until <= now {
		ref.RetryAfter = max(ref.RetryAfter, l.cfg.SyncInterval)
	}
	r.Decision, r.at, r.eta = ref, now, ref.RetryAfter
	return r, nil
}

// askReserve asks the fleet for room for r, which the node's share could
// not make at once at now, as ask does for AllowN: each time the share
// changes (Retry) the reservation is tried again in it, at once, and asked
// again while still short, until deadline. It returns the last answer, and
// the reservation when the share made it (res); a faulted key's answer is
// Unreachable (the fallback decides it). Once the fleet has no room
// (Refuse), or AskWait ended (Expired, counted), the caller makes the
// reservation in what the node holds.
func (l *Limiter) askReserve(ctx context.Context, now int64, r *Reservation, maxWait time.Duration, deadline int64) (async.Answer, *limit.Reservation, error) {
	asked := now
	for {
		ans := l.async.Ask(ctx, now, asked, r.key, r.lim, r.n, deadline)
		if l.closed.Load() {
			return ans, nil, ErrClosed
		}
		if ans.Verdict == protocol.Expired {
			l.askTimedOut(r.key, r.lim)
		}
		if ans.Verdict != protocol.Retry {
			return ans, nil, nil
		}
		now = l.now()
		res, err := l.engine.ReserveN(now, r.key, r.lim, r.n, maxWait)
		switch {
		case err == nil:
			return ans, &res, nil
		case errors.Is(err, local.ErrFaulted):
			return async.Answer{Verdict: protocol.Unreachable}, nil, nil
		case !errors.Is(err, local.ErrShort):
			return ans, nil, err
		case now >= deadline:
			l.askTimedOut(r.key, r.lim)
			return ans, nil, nil
		}
	}
}

// memoryWait is the longest a reservation made in memory may wait while a
// Redis mode runs: one burst tolerance, the debt reconciliation carries.
func memoryWait(lim Limit) time.Duration {
	if lim.Validate() != nil {
		return 0 // the engine reports the invalid limit
	}
	return lim.Tolerance()
}

// degradedReserve reserves in memory under the fallback.
func (l *Limiter) degradedReserve(r *Reservation, maxWait time.Duration) (*Reservation, error) {
	now := l.now()
	switch l.cfg.Fallback {
	case FailOpen:
		res, err := l.engine.ReserveN(now, r.key, r.lim, r.n, maxWait)
		if err != nil {
			return nil, err
		}
		if !res.Allowed {
			if err := l.engine.RecordN(now, r.key, r.lim, r.n); err != nil {
				return nil, err
			}
			res.Allowed, res.RetryAfter, res.Delay = true, 0, 0
		}
		r.made(res, Degraded, maxWait)
		return r, nil
	case FailClosed:
		res, err := l.engine.AllowN(now, r.key, r.lim, 0) // validates, and reports without spending
		if err != nil {
			return nil, err
		}
		res.Allowed = false
		res.RetryAfter = max(l.breaker.ProbeIn(), time.Millisecond)
		r.Decision, r.at = Decision{Result: res, Source: Degraded}, now // RetryAfter says when to try again
		return r, nil
	}
	res, err := l.engine.ReserveN(now, r.key, r.lim, r.n, maxWait)
	if err != nil {
		return nil, err
	}
	r.made(res, Degraded, maxWait)
	return r, nil
}

// Wait is shorthand for WaitN(ctx, key, lim, 1).
func (l *Limiter) Wait(ctx context.Context, key string, lim Limit) error {
	return l.WaitN(ctx, key, lim, 1)
}

// WaitN blocks until a request of weight n for key may proceed under lim,
// with golang.org/x/time/rate's semantics: it returns an error at once if n
// exceeds the limit's capacity, if ctx is already done, or if the wait
// would outlast ctx's deadline (that error wraps
// context.DeadlineExceeded, and nothing is reserved); if ctx ends while it
// waits, it cancels the reservation (see Reservation.Cancel) and returns
// ctx's error.
//
// Where ReserveN would refuse for another reason (a full leaky-bucket
// queue, a wait longer than memory may promise), WaitN waits for the
// RetryAfter and tries again. The wait runs on the limiter's Clock when it
// is a clock.Sleeper (the real and the manual clock are), else on the real
// clock; ctx's deadline is always real time.
func (l *Limiter) WaitN(ctx context.Context, key string, lim Limit, n int64) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if !lim.Algorithm.IsBucket() {
		return fmt.Errorf("%w: wait needs the token or leaky bucket, not %v", ErrUnsupported, lim.Algorithm)
	}
	if err := lim.Validate(); err != nil {
		return err
	}
	if err := lim.CheckN(n); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		deadline, bounded := ctx.Deadline()
		maxWait := limit.MaxSpan
		if bounded {
			maxWait = min(maxWait, time.Until(deadline))
			if maxWait < 0 {
				return fmt.Errorf("hybrid: WaitN(n=%d) would exceed the context's deadline: %w", n, context.DeadlineExceeded)
			}
		}
		r, err := l.reserve(ctx, key, lim, n, maxWait)
		if err != nil {
			return err
		}
		if r.Allowed {
			if r.delay <= 0 {
				return nil
			}
			if err := l.sleep(ctx, r.delay); err != nil {
				_ = r.Cancel(context.WithoutCancel(ctx))
				return err
			}
			return nil
		}
		// Refused: hopeless when it could not act before the deadline; else
		// (a full queue, a wait memory may not promise) wait and try again.
		if left := time.Until(deadline); bounded && (r.RetryAfter >= left || r.eta > left) {
			return fmt.Errorf("hybrid: WaitN(n=%d) would exceed the context's deadline: %w", n, context.DeadlineExceeded)
		}
		if err := l.sleep(ctx, r.RetryAfter); err != nil {
			return err
		}
	}
}

// sleep waits d on the limiter's clock, or until ctx is done.
func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	var ch <-chan time.Time
	var stop func()
	if s, ok := l.clock.(clock.Sleeper); ok {
		ch, stop = s.After(d)
	} else {
		t := time.NewTimer(d)
		ch, stop = t.C, func() { t.Stop() }
	}
	defer stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
		return nil
	}
}
