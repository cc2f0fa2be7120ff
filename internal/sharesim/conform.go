package sharesim

import (
	"github.com/hybridlimit/hybridlimit/limit"
)

// exact is one exact limiter of a limit, the standard compliance is judged
// against: fed a series' requests in the order of the times they were judged
// at, it admits a request when a single limiter holding the whole limit
// would, and then charges it. Its rules are fleetcheck.Conforms's at the
// fraction 1 (the GCRA for the token bucket, the meter for the leaky bucket,
// windows aligned to the Unix epoch for the window counters). The zero value
// is not usable: use newExact.
type exact struct {
	lim limit.Limit
	// The buckets: the emission interval and the tolerance (ns), and the
	// theoretical arrival time.
	t, tau, tat float64
	started     bool
	// The window counters: the window last seen and the weight in it and in
	// the one before.
	win       int64
	cur, prev float64
}

func newExact(lim limit.Limit) *exact {
	e := &exact{lim: lim}
	if lim.Algorithm.IsBucket() {
		// In whole nanoseconds, as the library computes them.
		e.t = float64(lim.Interval())
		e.tau = float64(lim.Tolerance())
	}
	return e
}

// eps absorbs float rounding (ns), far below any clock's resolution.
const eps = 1e-3

// admit reports whether the exact limiter admits n at unix (ns, the store's
// clock), charging it if so.
func (e *exact) admit(unix, n int64) bool {
	// The buckets count from the scenario's start: at Unix ns, a float64
	// resolves only 256 ns.
	now := float64(unix - base)
	switch e.lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		e.start(unix)
		start := max(e.tat, now)
		cost := float64(n) * e.t
		if e.lim.Algorithm == limit.TokenBucket && start+cost-now > e.tau+eps {
			return false
		}
		if e.lim.Algorithm == limit.LeakyBucket && (start > now+eps || n > e.lim.Capacity()) {
			return false
		}
		e.tat = start + cost
		return true
	case limit.FixedWindow, limit.SlidingWindowCounter:
		p := int64(e.lim.Period)
		w := unix / p
		e.start(unix)
		used := e.cur
		if w == e.win && e.lim.Algorithm == limit.SlidingWindowCounter {
			used += e.prev * float64(p-(unix-w*p)) / float64(p)
		}
		if w < e.win {
			// Judged times are in order; a request behind the window seen
			// cannot be placed: not admitted, so not judged.
			return false
		}
		if used+float64(n) > float64(e.lim.Rate)+eps {
			return false
		}
		e.cur += float64(n)
		return true
	}
	return false
}

// room is what the exact limiter has left at unix, in requests of weight 1.
func (e *exact) room(unix int64) float64 {
	if e.lim.Algorithm.IsBucket() {
		return (e.tau - (e.tat - float64(unix-base))) / e.t
	}
	used := e.cur
	if p := int64(e.lim.Period); e.lim.Algorithm == limit.SlidingWindowCounter && unix/p == e.win {
		used += e.prev * float64(p-(unix-e.win*p)) / float64(p)
	}
	return float64(e.lim.Rate) - used
}

// start brings the exact limiter to unix: a fresh one starts there (a
// full bucket, an empty window), a window counter moves to unix's window
// (not back: a time behind the window seen changes nothing).
func (e *exact) start(unix int64) {
	if e.lim.Algorithm.IsBucket() {
		if !e.started {
			e.tat, e.started = float64(unix-base), true // a full bucket
		}
		return
	}
	w := unix / int64(e.lim.Period)
	switch {
	case !e.started:
		e.win, e.started = w, true
	case w == e.win+1:
		e.prev, e.cur, e.win = e.cur, 0, w
	case w > e.win+1:
		e.prev, e.cur, e.win = 0, 0, w
	}
}

// charge charges n at unix whether or not the limit has room: what the
// fleet admitted beyond the exact limiter, which it owes back, or what it
// admitted after a reset of requests that came before it (they waited
// across it).
func (e *exact) charge(unix, n int64) {
	e.start(unix)
	if e.lim.Algorithm.IsBucket() {
		e.tat = max(e.tat, float64(unix-base)) + float64(n)*e.t
		return
	}
	if unix/int64(e.lim.Period) == e.win {
		e.cur += float64(n)
	}
}
