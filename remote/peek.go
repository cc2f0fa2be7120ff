package remote

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/intmath"
	"github.com/hybridlimit/hybridlimit/limit"
)

// PeekN reports what AllowNKnown(ctx, key, lim, n, k) would answer now, on
// Redis server TIME, and writes nothing: one script (peek.lua) reads the
// key's state and TIME atomically, and the decision is worked out from them
// as the decide scripts work it out (the sliding window log's in the script
// itself, which needs the log's ranks). A key whose state is gone while k's
// estimate says it had spent is answered from the estimate, as the decision
// would restore it; Lost says so. The Decision's State is the state the
// decision would leave. Errors are AllowN's.
func (s *Store) PeekN(ctx context.Context, key string, lim limit.Limit, n int64, k Known) (Decision, error) {
	if err := check(key, lim, n); err != nil {
		return Decision{}, err
	}
	rk := redisKey(s.prefix, lim, key)
	if lim.Algorithm == limit.SlidingWindowLog {
		vals, err := run(ctx, s.client, s.scripts.peek, []string{rk, rk + ":n"},
			"log", int64(lim.Period/time.Microsecond), lim.Rate, n).Slice()
		if err != nil {
			return Decision{}, classify("peek", key, err)
		}
		return logDecision("peek", key, lim, vals)
	}
	fields := []any{"hash", "t", "l"}
	if !lim.Algorithm.IsBucket() {
		fields = []any{"hash", "w", "c", "p"}
	}
	vals, err := run(ctx, s.client, s.scripts.peek, []string{rk}, fields...).Slice()
	if err != nil {
		return Decision{}, classify("peek", key, err)
	}
	if len(vals) != len(fields) {
		return Decision{}, classify("peek", key, fmt.Errorf("%w: %d values, want %d: %v", ErrBadReply, len(vals), len(fields), vals))
	}
	now, ok := vals[0].(int64)
	if !ok {
		return Decision{}, classify("peek", key, fmt.Errorf("%w: TIME is %T %v", ErrBadReply, vals[0], vals[0]))
	}
	st, err := optionalInts(vals[1:])
	if err != nil {
		return Decision{}, classify("peek", key, err)
	}
	if lim.Algorithm.IsBucket() {
		return peekGCRA(lim, n, now, st, k), nil
	}
	return s.peekWindow(lim, n, now, st, k)
}

// peekGCRA decides as gcra.lua does in modes 0 and 1 (the token bucket, the
// leaky meter), at nowUs, from the hash's t and l (nil when missing).
func peekGCRA(lim limit.Limit, n, nowUs int64, st []*int64, k Known) Decision {
	interval, tau := int64(lim.Interval()), int64(lim.Tolerance())
	level, lost := int64(0), false
	switch t, l := st[0], st[1]; {
	case t != nil && l != nil:
		level = max(*l-max(nowUs-*t, 0)*1000, 0) // a clock stepped back refills nothing
	case k.level() > 0:
		level, lost = k.level(), true
	}
	cost := intmath.MulSat(n, interval)
	mode, allowed := modeToken, level+cost <= tau
	if lim.Algorithm == limit.LeakyBucket {
		mode, allowed = modeMeter, level == 0
	}
	after := level
	if allowed && n > 0 {
		after += cost
	}
	d := gcraDecision(lim, n, mode, allowed, level, after, nowUs*1000, 0)
	d.Lost = lost
	return d
}

// peekWindow decides as window.lua does, at nowUs, from the hash's w, c and
// p (nil when missing).
func (s *Store) peekWindow(lim limit.Limit, n, nowUs int64, st []*int64, k Known) (Decision, error) {
	var loc *time.Location
	var w, start, end int64 // the window holding now, its bounds in µs
	if lim.Calendar != limit.NoCalendar {
		var err error
		if loc, err = s.zones.Load(lim.Zone); err != nil {
			return Decision{}, err
		}
		win := lim.WindowAt(nowUs*1000, loc)
		w, start, end = win.Index, win.Start/1000, win.End/1000
	} else {
		period := int64(lim.Period / time.Microsecond)
		w = nowUs / period
		start, end = w*period, (w+1)*period
	}
	var c, p int64
	sw, has := int64(0), st[0] != nil
	if has {
		sw = *st[0]
		c, p = deref(st[1]), deref(st[2])
	}
	e := k.Estimate
	lost := !has && e.Window > 0 && (e.Count > 0 || e.Prev > 0) && e.Window >= w-1
	if lost {
		sw, c, p, has = e.Window, max(e.Count, 0), max(e.Prev, 0), true
	}
	switch {
	case !has || sw < w-1:
		c, p = 0, 0
	case sw == w-1:
		p, c = c, 0
	case sw > w: // Redis's clock stepped back: never reopen a window
		win := lim.WindowOf(sw, loc)
		w, start, end = sw, win.Start/1000, win.End/1000
	}
	used := c
	if lim.Algorithm == limit.SlidingWindowCounter {
		used = intmath.Weighted(p, c, min(max(nowUs-start, 0), end-start-1), end-start)
	}
	allowed := used+n <= lim.Rate
	if allowed && n > 0 {
		c += n
	}
	now := nowUs * 1000
	res := windowResult(lim, allowed, n, c, p, now, lim.WindowOf(w, loc), lim.WindowOf(w+1, loc).End)
	return Decision{Result: res, State: limit.State{Window: w, Count: c, Prev: p}, Now: now, Lost: lost}, nil
}

// optionalInts reads a script's reply of integers that may be missing
// (nil), as Redis returns hash fields: integers or their decimal strings.
func optionalInts(vals []any) ([]*int64, error) {
	out := make([]*int64, len(vals))
	for i, v := range vals {
		var x int64
		switch v := v.(type) {
		case nil:
			continue
		case int64:
			x = v
		case string:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: value %d is %q", ErrBadReply, i, v)
			}
			x = int64(f)
		default:
			return nil, fmt.Errorf("%w: value %d is %T %v", ErrBadReply, i, v, v)
		}
		out[i] = &x
	}
	return out, nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
