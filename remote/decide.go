package remote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/intmath"
	"github.com/hybridlimit/hybridlimit/limit"
)

// Decision is a decision Redis made: the Result, the state the key was left
// in (to seed a node's memory), and Redis's clock at the time.
type Decision struct {
	limit.Result
	// Delay is, for ReserveN, how long the admitted request must wait.
	Delay time.Duration
	// State is the key's state after the decision. The sliding window log
	// reports none.
	State limit.State
	// Now is Redis's TIME at the decision, in Unix ns.
	Now int64
	// Lost reports that the key's state was gone (evicted, deleted) while
	// the caller's estimate said it had spent: it was restored to the
	// estimate before deciding.
	Lost bool
}

// Known is what the caller knows of a key when it asks Redis to decide:
// its sequence number for the decision and its estimate of the key's state.
type Known struct {
	// Seq is this node's sequence number for the decision (positive: kept
	// in the key when admitted; see AllowNKnown).
	Seq int64
	// Low is the caller's low mark: every decision of this node with a
	// sequence number at or below it has had its answer, or was reported
	// (Report.Uncertain) and that report acknowledged. Redis keeps the
	// admitted decisions of the node above it, and forgets those at or
	// below: a report names a timed-out decision however many the node
	// made since. Zero keeps the node's last eight, as before.
	Low int64
	// Estimate is the caller's estimate of the key's state (the local
	// engine's, kept warm by earlier decisions), and Now its Redis-aligned
	// time then (Unix ns): when Redis finds the key's state gone while the
	// estimate says it had spent, it restores it to at least that.
	Estimate limit.State
	Now      int64
}

// ErrNotBucket is returned by ReserveN and CancelN for a limit whose
// algorithm is not a bucket: the window algorithms cannot reserve.
var ErrNotBucket = errors.New("remote: reserve needs the token or leaky bucket")

// GCRA modes of gcra.lua.
const (
	modeToken = iota
	modeMeter
	modeQueue
	modeTokenReserve
	modeCancel
)

// AllowN decides, in one script on Redis, whether a request of weight n for
// key may pass under lim, and spends n if so: exact across every node. n == 0
// reports the state without spending. A caller error (bad key, limit or n)
// returns the limit package's error; a Redis fault returns an *Error.
func (s *Store) AllowN(ctx context.Context, key string, lim limit.Limit, n int64) (Decision, error) {
	return s.AllowNKnown(ctx, key, lim, n, Known{})
}

// AllowNKnown is AllowN with what the caller knows (see Known). A caller
// that gives up waiting for the answer and decides the request again in
// memory names k.Seq in the report of that spend (Report.Uncertain), so
// the request is counted once whether or not this call reached Redis. The
// sliding window log, which has no report, ignores it.
func (s *Store) AllowNKnown(ctx context.Context, key string, lim limit.Limit, n int64, k Known) (Decision, error) {
	if err := check(key, lim, n); err != nil {
		return Decision{}, err
	}
	switch lim.Algorithm {
	case limit.TokenBucket:
		return s.gcra(ctx, "allow", key, lim, n, modeToken, k, 0, 0)
	case limit.LeakyBucket:
		return s.gcra(ctx, "allow", key, lim, n, modeMeter, k, 0, 0)
	case limit.SlidingWindowLog:
		return s.log(ctx, key, lim, n)
	default:
		return s.window(ctx, key, lim, n, k)
	}
}

// ReserveN reserves, in one script on Redis, a request of weight n for key
// under lim, if it can act within maxWait (at most limit.MaxSpan: a longer
// or negative one is cut to that range), as golang.org/x/time/rate's
// ReserveN does: on the token bucket the bucket goes into debt; on the
// leaky bucket the request takes a place in the queue, which must have
// room. When admitted, the Decision's Delay says how long it must wait from
// its Now.
func (s *Store) ReserveN(ctx context.Context, key string, lim limit.Limit, n int64, maxWait time.Duration) (Decision, error) {
	if !lim.Algorithm.IsBucket() {
		return Decision{}, fmt.Errorf("%w, not %v", ErrNotBucket, lim.Algorithm)
	}
	if err := check(key, lim, n); err != nil {
		return Decision{}, err
	}
	mode := modeTokenReserve
	if lim.Algorithm == limit.LeakyBucket {
		mode = modeQueue
	}
	return s.gcra(ctx, "reserve", key, lim, n, mode, Known{}, int64(min(max(maxWait, 0), limit.MaxSpan)), 0)
}

// CancelN gives back, in one script on Redis, a reservation of weight n for
// key under lim that was to act at act (Unix ns on Redis's clock: its
// Decision's Now + Delay), as x/time/rate's Reservation.CancelAt does:
// nothing once act has passed, else its n intervals less the time later
// reservations already count on. It reports whether anything was given
// back; the Decision holds the key's state after it.
func (s *Store) CancelN(ctx context.Context, key string, lim limit.Limit, n, act int64) (bool, Decision, error) {
	if !lim.Algorithm.IsBucket() {
		return false, Decision{}, fmt.Errorf("%w, not %v", ErrNotBucket, lim.Algorithm)
	}
	if err := check(key, lim, n); err != nil {
		return false, Decision{}, err
	}
	us, ns := act/1000, act%1000
	if ns < 0 {
		us, ns = us-1, ns+1000
	}
	d, err := s.gcra(ctx, "cancel", key, lim, n, modeCancel, Known{}, us, ns)
	gave := d.Allowed
	d.Allowed = false
	return gave, d, err
}

// level is the bucket level k's estimate stands for at its time, in ns
// (0: none): what gcra.lua restores a key whose state is gone to.
func (k Known) level() int64 {
	if k.Estimate.TAT > k.Now && k.Now > 0 {
		return k.Estimate.TAT - k.Now
	}
	return 0
}

// seqArg encodes k's sequence number and low mark as the decide scripts
// read them: "seq:low", or "seq" without a low mark.
func seqArg(k Known) string {
	seq := strconv.FormatInt(max(k.Seq, 0), 10)
	if k.Low <= 0 || k.Seq <= 0 {
		return seq
	}
	return seq + ":" + strconv.FormatInt(k.Low, 10)
}

func check(key string, lim limit.Limit, n int64) error {
	if err := limit.CheckKey(key); err != nil {
		return err
	}
	if err := lim.Validate(); err != nil {
		return err
	}
	return lim.CheckN(n)
}

// gcra runs gcra.lua in mode, with what the caller knows (k) and the mode's
// two arguments a9 and a10 (see the script).
func (s *Store) gcra(ctx context.Context, op, key string, lim limit.Limit, n int64, mode int, k Known, a9, a10 int64) (Decision, error) {
	interval, tau := int64(lim.Interval()), int64(lim.Tolerance())
	vals, err := run(ctx, s.client, s.scripts.gcra, []string{redisKey(s.prefix, lim, key)},
		interval, tau, n, mode, ms(s.active), s.node, seqArg(k), k.level(), a9, a10).Slice()
	if err != nil {
		return Decision{}, classify(op, key, err)
	}
	v, err := ints(vals, 4)
	if err != nil {
		return Decision{}, classify(op, key, err)
	}
	d := gcraDecision(lim, n, mode, v[0] == 1, v[1], v[2], v[3]*1000, a9)
	d.Lost = len(vals) > 4 && vals[4] == int64(1)
	return d, nil
}

// gcraDecision is the Decision of a gcra.lua run in mode for a request of
// weight n under lim, from what the script returns (whether it admitted the
// request, the level before and after, Redis's TIME now in Unix ns) and the
// mode's argument a9.
func gcraDecision(lim limit.Limit, n int64, mode int, allowed bool, before, after, now, a9 int64) Decision {
	interval, tau := int64(lim.Interval()), int64(lim.Tolerance())
	d := Decision{Result: limit.Result{Limit: lim, Allowed: allowed}, State: limit.State{TAT: now + after}, Now: now}
	cost := intmath.MulSat(n, interval)
	switch {
	case mode == modeMeter:
		if !allowed {
			d.RetryAfter = time.Duration(before)
		}
		if after == 0 {
			d.Remaining = 1
		}
	case mode == modeCancel:
	case mode == modeQueue:
		fits := before+cost <= tau
		switch {
		case allowed:
			d.Delay = time.Duration(before)
		case !fits:
			d.RetryAfter = time.Duration(max(before+cost-tau, before-a9))
		default:
			d.RetryAfter = time.Duration(before - a9)
		}
	case mode == modeTokenReserve:
		wait := max(before+cost-tau, 0)
		if allowed {
			d.Delay = time.Duration(wait)
		} else {
			d.RetryAfter = time.Duration(wait - a9)
		}
	case !allowed:
		d.RetryAfter = time.Duration(before + cost - tau)
	}
	if mode != modeMeter {
		d.Remaining = max(tau-after, 0) / interval
	}
	d.ResetAfter = time.Duration(after)
	return d
}

func (s *Store) window(ctx context.Context, key string, lim limit.Limit, n int64, k Known) (Decision, error) {
	sliding := 0
	if lim.Algorithm == limit.SlidingWindowCounter {
		sliding = 1
	}
	args := []any{int64(lim.Period / time.Microsecond), lim.Rate, n, sliding, ms(s.active), s.node, seqArg(k),
		k.Estimate.Window, max(k.Estimate.Count, 0), max(k.Estimate.Prev, 0)}
	var loc *time.Location
	var near [3]limit.Window // the node's window and its neighbours
	if lim.Calendar != limit.NoCalendar {
		var err error
		if loc, err = s.zones.Load(lim.Zone); err != nil {
			return Decision{}, err
		}
		cur := lim.WindowAt(s.now(), loc)
		near = [3]limit.Window{lim.WindowOf(cur.Index-1, loc), cur, lim.WindowOf(cur.Index+1, loc)}
		args = append(args, cur.Index, near[0].Start/1000, cur.Start/1000, cur.End/1000, near[2].End/1000)
	}
	vals, err := run(ctx, s.client, s.scripts.window, []string{redisKey(s.prefix, lim, key)}, args...).Slice()
	if err != nil {
		return Decision{}, classify("allow", key, err)
	}
	v, err := ints(vals, 5)
	if err != nil {
		return Decision{}, classify("allow", key, err)
	}
	allowed, w, c, p, now := v[0] == 1, v[1], v[2], v[3], v[4]*1000
	win, nextEnd := lim.WindowOf(w, nil), lim.WindowOf(w+1, nil).End
	if loc != nil {
		win, nextEnd = calendarWindow(lim, loc, near, w)
	}
	return Decision{Result: windowResult(lim, allowed, n, c, p, now, win, nextEnd), State: limit.State{Window: w, Count: c, Prev: p}, Now: now,
		Lost: len(vals) > 5 && vals[5] == int64(1)}, nil
}

// calendarWindow is the calendar window w, which the script took, and the
// next one's end: among the windows near the node's, or computed.
func calendarWindow(lim limit.Limit, loc *time.Location, near [3]limit.Window, w int64) (limit.Window, int64) {
	for i, x := range near {
		if x.Index == w {
			if i < 2 {
				return x, near[i+1].End
			}
			return x, lim.WindowOf(w+1, loc).End
		}
	}
	return lim.WindowOf(w, loc), lim.WindowOf(w+1, loc).End
}

// windowResult derives a window algorithm's Result from its state at now,
// in window win, followed by a window that ends at nextEnd.
func windowResult(lim limit.Limit, allowed bool, n, c, p, now int64, win limit.Window, nextEnd int64) limit.Result {
	res := limit.Result{Limit: lim, Allowed: allowed}
	period := win.End - win.Start
	elapsed := min(max(now-win.Start, 0), period-1)
	if lim.Algorithm == limit.FixedWindow {
		end := win.End - now
		if !allowed {
			res.RetryAfter = time.Duration(end)
		}
		if c > 0 {
			res.ResetAfter = time.Duration(end)
		}
		res.Remaining = max(lim.Rate-c, 0)
		return res
	}
	if !allowed {
		res.RetryAfter = time.Duration(intmath.SlidingRetry(p, c, elapsed, period, max(lim.Rate-n, 0)))
	}
	res.Remaining = max(lim.Rate-intmath.Weighted(p, c, elapsed, period), 0)
	switch {
	case c > 0:
		res.ResetAfter = time.Duration(nextEnd - win.Start - elapsed)
	case p > 0:
		res.ResetAfter = time.Duration(period - elapsed)
	}
	return res
}

func (s *Store) log(ctx context.Context, key string, lim limit.Limit, n int64) (Decision, error) {
	k := redisKey(s.prefix, lim, key)
	vals, err := run(ctx, s.client, s.scripts.log, []string{k, k + ":n"},
		int64(lim.Period/time.Microsecond), lim.Rate, n, ms(s.active)).Slice()
	if err != nil {
		return Decision{}, classify("allow", key, err)
	}
	return logDecision("allow", key, lim, vals)
}

// logDecision is the Decision of log.lua's reply vals (peek.lua's in its
// 'log' form is the same) for key under lim.
func logDecision(op, key string, lim limit.Limit, vals []any) (Decision, error) {
	v, err := ints(vals, 5)
	if err != nil {
		return Decision{}, classify(op, key, err)
	}
	d := Decision{Result: limit.Result{Limit: lim, Allowed: v[0] == 1}, Now: v[4] * 1000}
	d.Remaining = max(lim.Rate-v[1], 0)
	d.RetryAfter = time.Duration(v[2]) * time.Microsecond
	d.ResetAfter = time.Duration(v[3]) * time.Microsecond
	return d, nil
}

// ints reads the first want elements of a script's reply as integers.
// Fractional numbers come back from Lua as strings; integers as integers.
func ints(vals []any, want int) ([]int64, error) {
	if len(vals) < want {
		return nil, fmt.Errorf("%w: %d values, want %d: %v", ErrBadReply, len(vals), want, vals)
	}
	out := make([]int64, want)
	for i := range want {
		switch x := vals[i].(type) {
		case int64:
			out[i] = x
		case string:
			if n, err := strconv.ParseInt(x, 10, 64); err == nil {
				out[i] = n // exact, where a float64 would round past 2^53
				continue
			}
			f, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: value %d is %q", ErrBadReply, i, x)
			}
			out[i] = int64(f)
		default:
			return nil, fmt.Errorf("%w: value %d is %T %v", ErrBadReply, i, x, x)
		}
	}
	return out, nil
}
