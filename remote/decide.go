package remote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/ratemath"
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
}

// ErrNotQueue is returned by ReserveN for a limit that is not a leaky bucket.
var ErrNotQueue = errors.New("remote: reserve needs the leaky bucket")

// GCRA modes of gcra.lua.
const (
	modeToken = iota
	modeMeter
	modeQueue
)

// AllowN decides, in one script on Redis, whether a request of weight n for
// key may pass under lim, and spends n if so: exact across every node. n == 0
// reports the state without spending. A caller error (bad key, limit or n)
// returns the limit package's error; a Redis fault returns an *Error.
func (s *Store) AllowN(ctx context.Context, key string, lim limit.Limit, n int64) (Decision, error) {
	if err := check(key, lim, n); err != nil {
		return Decision{}, err
	}
	switch lim.Algorithm {
	case limit.TokenBucket:
		return s.gcra(ctx, "allow", key, lim, n, modeToken)
	case limit.LeakyBucket:
		return s.gcra(ctx, "allow", key, lim, n, modeMeter)
	case limit.SlidingWindowLog:
		return s.log(ctx, key, lim, n)
	default:
		return s.window(ctx, key, lim, n)
	}
}

// ReserveN places a request of weight n in key's leaky-bucket queue on Redis:
// when admitted, the Decision's Delay says how long it must wait its turn.
func (s *Store) ReserveN(ctx context.Context, key string, lim limit.Limit, n int64) (Decision, error) {
	if lim.Algorithm != limit.LeakyBucket {
		return Decision{}, fmt.Errorf("%w, not %v", ErrNotQueue, lim.Algorithm)
	}
	if err := check(key, lim, n); err != nil {
		return Decision{}, err
	}
	return s.gcra(ctx, "reserve", key, lim, n, modeQueue)
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

func (s *Store) gcra(ctx context.Context, op, key string, lim limit.Limit, n int64, mode int) (Decision, error) {
	interval, tau := int64(lim.Interval()), int64(lim.Tolerance())
	vals, err := run(ctx, s.client, s.scripts.gcra, []string{redisKey(s.prefix, lim.Algorithm, key)},
		interval, tau, n, mode, ms(s.active)).Slice()
	if err != nil {
		return Decision{}, classify(op, key, err)
	}
	v, err := ints(vals, 4)
	if err != nil {
		return Decision{}, classify(op, key, err)
	}
	allowed, before, after, nowUs := v[0] == 1, v[1], v[2], v[3]
	now := nowUs * 1000
	d := Decision{Result: limit.Result{Limit: lim, Allowed: allowed}, State: limit.State{TAT: now + after}, Now: now}
	cost := ratemath.MulSat(n, interval)
	switch {
	case mode == modeMeter:
		if !allowed {
			d.RetryAfter = time.Duration(before)
		}
		if after == 0 {
			d.Remaining = 1
		}
	case allowed && mode == modeQueue:
		d.Delay = time.Duration(before)
	case !allowed:
		d.RetryAfter = time.Duration(before + cost - tau)
	}
	if mode != modeMeter {
		d.Remaining = max(tau-after, 0) / interval
	}
	d.ResetAfter = time.Duration(after)
	return d, nil
}

func (s *Store) window(ctx context.Context, key string, lim limit.Limit, n int64) (Decision, error) {
	sliding := 0
	if lim.Algorithm == limit.SlidingWindowCounter {
		sliding = 1
	}
	vals, err := run(ctx, s.client, s.scripts.window, []string{redisKey(s.prefix, lim.Algorithm, key)},
		int64(lim.Period/time.Microsecond), lim.Rate, n, sliding, ms(s.active)).Slice()
	if err != nil {
		return Decision{}, classify("allow", key, err)
	}
	v, err := ints(vals, 5)
	if err != nil {
		return Decision{}, classify("allow", key, err)
	}
	allowed, w, c, p, now := v[0] == 1, v[1], v[2], v[3], v[4]*1000
	return Decision{Result: windowResult(lim, allowed, n, w, c, p, now), State: limit.State{Window: w, Count: c, Prev: p}, Now: now}, nil
}

// windowResult derives a window algorithm's Result from its state at now.
func windowResult(lim limit.Limit, allowed bool, n, w, c, p, now int64) limit.Result {
	res := limit.Result{Limit: lim, Allowed: allowed}
	period := int64(lim.Period)
	elapsed := min(max(now-w*period, 0), period-1)
	if lim.Algorithm == limit.FixedWindow {
		end := (w+1)*period - now
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
		res.RetryAfter = time.Duration(ratemath.SlidingRetry(p, c, elapsed, period, max(lim.Rate-n, 0)))
	}
	res.Remaining = max(lim.Rate-ratemath.Weighted(p, c, elapsed, period), 0)
	switch {
	case c > 0:
		res.ResetAfter = time.Duration(2*period - elapsed)
	case p > 0:
		res.ResetAfter = time.Duration(period - elapsed)
	}
	return res
}

func (s *Store) log(ctx context.Context, key string, lim limit.Limit, n int64) (Decision, error) {
	k := redisKey(s.prefix, lim.Algorithm, key)
	vals, err := run(ctx, s.client, s.scripts.log, []string{k, k + ":n"},
		int64(lim.Period/time.Microsecond), lim.Rate, n, ms(s.active)).Slice()
	if err != nil {
		return Decision{}, classify("allow", key, err)
	}
	v, err := ints(vals, 5)
	if err != nil {
		return Decision{}, classify("allow", key, err)
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
