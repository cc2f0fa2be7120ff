// Package share holds the messages of Async mode's share protocol, between a
// node and the store that keeps contested keys' shares (Redis, through the
// scripts of package remote; or the Go model a simulation runs), and the
// arithmetic of shares in the store's units.
//
// A node decides a key in its share of the key's limit: a private bucket (or
// window) holding that fraction of the limit's rate and burst. While the
// shares of a key add up to at most the whole limit, the fleet never admits
// more than one exact limiter holding the whole limit would. A key nobody
// contests is split evenly among the nodes and costs the store nothing. A
// contested key's shares live in the store: a grant per node and a pool of
// the share nobody holds. Capacity moves with the spent state it carries: a
// node that gives up part of its share gives up as much of its state, and a
// node that grows takes the pool's state with it.
//
// The protocol itself, its states and its invariants, is described in
// docs/protocol.md.
package share

import (
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// One is the whole limit in share units: a share s is the fraction s/One.
// It equals local.ShareOne.
const One = 1 << 15

// Kind is how the store holds a limit's state.
type Kind int

// The kinds of state. The sliding window log has none: its exact log cannot
// be divided into shares, so Async mode refuses it.
const (
	Bucket        Kind = iota // the token bucket, as GCRA: a level
	FixedWindow               // a window and its count
	SlidingWindow             // a window, its count and the previous one's
	Meter                     // the leaky bucket as a meter: a level, and a request passes once it has drained
)

// KindOf returns the kind of lim's state, and false for a limit Async mode
// cannot share (the sliding window log, a calendar limit).
func KindOf(lim limit.Limit) (Kind, bool) {
	if lim.Calendar != limit.NoCalendar {
		return 0, false
	}
	switch lim.Algorithm {
	case limit.TokenBucket:
		return Bucket, true
	case limit.LeakyBucket:
		return Meter, true
	case limit.FixedWindow:
		return FixedWindow, true
	case limit.SlidingWindowCounter:
		return SlidingWindow, true
	}
	return 0, false
}

// State is a limit's state as the whole fleet's, in the store's units: what
// one exact limiter holding the whole limit would hold. A share g with state
// x has spent g/One of it.
//
//   - Bucket, Meter: Level is how far the GCRA theoretical arrival time runs
//     ahead of the state's time, in ns (0: full, or drained).
//   - FixedWindow: Window is the window's index (time / period), Count the
//     weight counted in it, in 1/One requests.
//   - SlidingWindow: as FixedWindow, and Prev the previous window's count.
type State struct {
	Level  int64
	Window int64
	Count  int64
	Prev   int64
}

// Params are what the store needs of a limit, in its units.
type Params struct {
	Kind Kind
	// Interval is a bucket's emission interval and Tolerance its burst
	// tolerance (capacity × interval), in ns.
	Interval, Tolerance int64
	// Capacity is the heaviest request the limit admits.
	Capacity int64
	// Period is a window's length in µs, Rate its limit in requests.
	Period, Rate int64
}

// ParamsOf returns lim's parameters; ok is false for a limit Async mode
// cannot share.
func ParamsOf(lim limit.Limit) (p Params, ok bool) {
	k, ok := KindOf(lim)
	if !ok {
		return p, false
	}
	p.Kind, p.Capacity = k, lim.Capacity()
	if k == Bucket || k == Meter {
		p.Interval, p.Tolerance = int64(lim.Interval()), int64(lim.Tolerance())
		return p, true
	}
	p.Period, p.Rate = int64(lim.Period/time.Microsecond), lim.Rate
	return p, true
}

// Decay returns x, a state as of µs at, as of µs now: a bucket drains one ns
// per ns, a window rolls over. Time that goes backwards changes nothing.
func (p Params) Decay(x State, at, now int64) State {
	if now <= at {
		return x
	}
	if p.level() {
		x.Level = max(x.Level-(now-at)*1000, 0)
		return x
	}
	cur := now / p.Period
	switch {
	case x.Window >= cur:
	case x.Window == cur-1 && p.Kind == SlidingWindow:
		x = State{Window: cur, Prev: x.Count}
	default:
		x = State{Window: cur}
	}
	return x
}

// Merge returns the state of shares g1 (state x1) and g2 (state x2) joined,
// both as of µs now: each value weighted by its share, rounded toward spent.
// Joining never creates room: the joined share admits at most what the two
// did apart. With g1 + g2 <= 0 it returns x1.
func (p Params) Merge(g1 int64, x1 State, g2 int64, x2 State) State {
	g := g1 + g2
	switch {
	case g <= 0 || g2 <= 0:
		return x1
	case g1 <= 0:
		return x2
	}
	if p.level() {
		return State{Level: weigh(g1, x1.Level, g2, x2.Level)}
	}
	if x1.Window != x2.Window {
		// Different windows after decay (a clock ahead): the later one's,
		// its counts spread over the joined share.
		if x2.Window > x1.Window {
			x1, g1, x2, g2 = x2, g2, x1, g1
		}
		return State{Window: x1.Window, Count: weigh(g1, x1.Count, g, 0), Prev: weigh(g1, x1.Prev, g, 0)}
	}
	return State{Window: x1.Window, Count: weigh(g1, x1.Count, g2, x2.Count), Prev: weigh(g1, x1.Prev, g2, x2.Prev)}
}

// weigh is ceil((g1·a + g2·b) / (g1 + g2)) in float64, as the scripts
// compute it (Lua's numbers are doubles): exact while the products stay
// below 2^53, rounded up past it, never down by more than the doubles' own
// rounding of a value that large.
func weigh(g1, a, g2, b int64) int64 {
	num := float64(float64(g1)*float64(a)) + float64(float64(g2)*float64(b))
	return int64(math.Ceil(num / float64(g1+g2)))
}

// Room returns how much weight a share g in state x (as of µs now) admits
// now, in requests, rounded down: a bucket's room below its tolerance, a
// window's below its rate.
func (p Params) Room(g int64, x State, now int64) int64 {
	if g <= 0 {
		return 0
	}
	if p.Kind == Meter {
		if g >= One && x.Level <= 0 {
			return p.Capacity // one request, of any weight up to the capacity
		}
		return 0
	}
	free := p.free(x, now)
	if free <= 0 {
		return 0
	}
	return int64(math.Floor(float64(float64(free)*float64(g)) / float64(p.unit()*One)))
}

// For returns the least share whose room in state x (as of µs now) is at
// least w requests, or -1 when no share can hold them (x has no room, or a
// whole share would not).
func (p Params) For(w int64, x State, now int64) int64 {
	if w <= 0 {
		return 0
	}
	if p.Kind == Meter {
		if x.Level <= 0 && w <= p.Capacity {
			return One // the whole meter, drained
		}
		return -1
	}
	free := p.free(x, now)
	if free <= 0 {
		return -1
	}
	g := int64(math.Ceil(float64(float64(w)*float64(p.unit()*One)) / float64(free)))
	if g > One {
		return -1
	}
	return g
}

// Grow returns the least share that, joined to share g in state x, makes
// room for w requests, taken from a pool in state pool (all as of µs now):
// 0 when g holds them already, -1 when the pool has no room at all.
func (p Params) Grow(w, g int64, x, pool State, now int64) int64 {
	if p.Kind == Meter {
		if g >= One && x.Level <= 0 {
			return 0
		}
		if p.Merge(g, x, One-g, pool).Level <= 0 {
			return One - g // the whole meter, if that is drained
		}
		return -1
	}
	short := float64(float64(w)*float64(p.unit()*One)) - float64(float64(g)*float64(max(p.free(x, now), 0)))
	if short <= 0 {
		return 0
	}
	free := p.free(pool, now)
	if free <= 0 {
		return -1
	}
	return int64(math.Ceil(short / float64(free)))
}

// Holds reports whether share g in state x, joined by share d in state pool
// (all as of µs now), has room for w requests.
func (p Params) Holds(w, g int64, x State, d int64, pool State, now int64) bool {
	if p.Kind == Meter {
		return g+d >= One && p.Merge(g, x, d, pool).Level <= 0 && w <= p.Capacity
	}
	have := float64(float64(g)*float64(max(p.free(x, now), 0))) + float64(float64(d)*float64(max(p.free(pool, now), 0)))
	return have >= float64(float64(w)*float64(p.unit()*One))
}

// unit is one request in the units free counts: a bucket's interval (ns),
// a window's One.
func (p Params) unit() int64 {
	if p.level() {
		return p.Interval
	}
	return One
}

// free is the room in state x as of µs now, in free's units (ns below the
// tolerance; 1/One requests below the rate).
func (p Params) free(x State, now int64) int64 {
	switch p.Kind {
	case Bucket, Meter:
		return p.Tolerance - x.Level
	case FixedWindow:
		return p.Rate*One - x.Count
	}
	start := x.Window * p.Period
	elapsed := min(max(now-start, 0), p.Period-1)
	weighted := int64(math.Ceil(float64(float64(x.Prev)*float64(p.Period-elapsed)) / float64(p.Period)))
	return p.Rate*One - weighted - x.Count
}

// When returns the µs, from now on, at which share g in state x (as of µs
// now) has room for w requests if nothing more is spent, or -1 when it never
// will (g is too small to hold them).
func (p Params) When(g, w int64, x State, now int64) int64 {
	if g <= 0 {
		return -1
	}
	if p.Kind == Meter {
		if g < One || w > p.Capacity {
			return -1
		}
		return now + (max(x.Level, 0)+999)/1000 // once it has drained
	}
	need := float64(float64(w)*float64(p.unit()*One)) / float64(g) // free units w needs in g
	switch p.Kind {
	case Bucket:
		most := float64(p.Tolerance) - need // the highest level that leaves the room
		if most < 0 {
			return -1
		}
		if float64(x.Level) <= most {
			return now
		}
		return now + int64(math.Ceil((float64(x.Level)-most)/1000))
	case FixedWindow:
		most := float64(p.Rate*One) - need
		if most < 0 {
			return -1
		}
		if float64(x.Count) <= most {
			return now
		}
		return (x.Window + 1) * p.Period
	}
	most := float64(p.Rate*One) - need
	if most < 0 {
		return -1
	}
	start := x.Window * p.Period
	elapsed := min(max(now-start, 0), p.Period-1)
	if float64(x.Count) <= most {
		// Within this window, as the previous one's weight decays.
		if x.Prev == 0 || float64(float64(x.Prev)*float64(p.Period-elapsed))/float64(p.Period)+float64(x.Count) <= most {
			return now
		}
		e := float64(p.Period) * (1 - (most-float64(x.Count))/float64(x.Prev))
		if e < float64(p.Period) {
			return start + int64(math.Ceil(e))
		}
	}
	// In the next window, where this one's count weighs as the previous.
	next := (x.Window + 1) * p.Period
	if x.Count == 0 || float64(x.Count) <= most {
		return next
	}
	return next + int64(math.Ceil(float64(p.Period)*(1-most/float64(x.Count))))
}

// Spend returns state x of share g (as of µs now) after it admits w
// requests: the whole fleet's estimate moves by w over g, rounded toward
// spent.
func (p Params) Spend(x State, g, w, now int64) State {
	if g <= 0 || w <= 0 {
		return x
	}
	if p.level() {
		x.Level += int64(math.Ceil(float64(float64(w)*float64(p.Interval)*One) / float64(g)))
		return x
	}
	x.Count += int64(math.Ceil(float64(float64(w)*One*One) / float64(g)))
	return x
}

// Charge returns state x of a share g (a level's kinds: a bucket's, a
// meter's) charged with level, a level of the whole limit (one bucket of
// it, a node's shadow): what was admitted outside the share, counted in it.
// The charge is at most MaxCharge: a whole bucket charged to a sliver of a
// pool of a long limit would overflow, and past 2^53 the script's doubles
// and these integers part.
func (p Params) Charge(x State, g, level int64) State {
	if g <= 0 || level <= 0 || !p.level() {
		return x
	}
	x.Level += int64(min(math.Ceil(float64(float64(level)*One)/float64(g)), MaxCharge))
	return x
}

// MaxCharge is the most Charge adds to a level: 2^53 ns (104 days), the
// largest integer a double holds exactly, where a pool is spent for far
// longer than any refill it could see.
const MaxCharge = 1 << 53

// Spent returns the state of a share that has spent all it could: what the
// store takes a share it lost track of to be (a lease that lapsed).
func (p Params) Spent(now int64) State {
	if p.level() {
		return State{Level: p.Capacity * p.Interval}
	}
	return State{Window: now / p.Period, Count: p.Rate * One}
}

// Refill returns how long a spent state takes to be full again, in µs.
func (p Params) Refill() int64 {
	if p.level() {
		return (p.Capacity*p.Interval + 999) / 1000
	}
	return 2 * p.Period
}

// level reports whether p's state is a level (the buckets).
func (p Params) level() bool { return p.Kind == Bucket || p.Kind == Meter }

// Even is the even split of a fleet of n nodes: One/n, rounded to the
// nearest unit (local.ShareAmong), One for n <= 1.
func Even(n int) int64 {
	if n <= 1 {
		return One
	}
	return int64(math.Round(1 / float64(n) * float64(One)))
}
