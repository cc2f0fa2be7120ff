package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// filterSize is how many recent samples the offset filter keeps, as NTP's
// clock filter does: the lowest round trip among them wins.
const filterSize = 8

// DefaultMaxSlew is how fast Offset lets its applied offset fall when a
// better estimate says Redis is behind what we assumed: 5%, so a 10 ms
// correction takes 200 ms and the mapped time keeps moving forward meanwhile.
const DefaultMaxSlew = 0.05

// DefaultStepThreshold is how far a sample's offset may stray from the
// estimate, beyond what the two round trips explain, before Offset calls it
// a step of one clock or the other rather than noise: as NTP's 128 ms, a
// little under.
const DefaultStepThreshold = 100 * time.Millisecond

// Offset maps this node's clock onto Redis server TIME. It is fed with round
// trips (local send, server time, local receive), keeps the most recent
// samples and trusts the one with the lowest round trip, NTP-style: its
// offset is the least distorted by queueing, and half its round trip bounds
// the error.
//
// The mapping runs on the node's monotonic clock from the moment Offset was
// created, so a step of the node's wall clock does not move it; it moves
// forward at once when the estimate grows and slews back at most MaxSlew when
// the estimate falls, so Map never steps backwards by more than one slew step
// between two estimates and Now never steps backwards at all.
//
// Except across a step. A clock read through an injected Clock may step (a
// test's manual clock, a clock without a monotonic reading), and so may
// Redis TIME (a failover to a replica whose clock is behind). A sample whose
// offset lies further from the estimate than both round trips can explain,
// by more than the step threshold, is a step: Offset forgets the samples of
// the old timeline, applies the new offset at once in either direction,
// lets Now start again from the new mapping, counts the step and tells the
// OnStep function. So a step is recognised at the first sample after it:
// within one reconciliation round.
//
// The zero value is not usable; call NewOffset. Offset is safe for
// concurrent use; Map and Now do not lock.
type Offset struct {
	base     time.Time // local reading at creation, with its monotonic clock
	baseUnix int64     // base as Unix ns
	maxSlew  float64

	mu       sync.Mutex
	stepAt   int64      // ns: the step threshold
	onStep   func(Step) // told of each step, outside mu
	samples  [filterSize]sample
	count    int // samples held, up to filterSize
	next     int // ring position of the next sample
	target   int64
	adjusted time.Time // local reading at the last adjustment

	applied     atomic.Int64 // ns added to the local reading
	uncertainty atomic.Int64 // ns, half the chosen sample's round trip
	known       atomic.Bool
	floor       atomic.Int64 // the latest value Now returned
	steps       atomic.Uint64
}

// Step is a step of one clock against the other, as Offset recognised it.
type Step struct {
	// By is how far the mapped time moved: negative when it went back (the
	// node's clock had jumped forward, or Redis's back).
	By time.Duration
	// Local is the node's reading when the step was recognised, and Mapped
	// what Map returns for it from then on (Unix ns).
	Local  time.Time
	Mapped int64
}

type sample struct {
	offset int64
	rtt    int64
}

// NewOffset returns an estimator that knows nothing yet: until the first
// sample it maps local time to itself. now is the local reading it anchors
// the monotonic mapping to, normally time.Now().
func NewOffset(now time.Time) *Offset {
	return &Offset{base: now, baseUnix: now.UnixNano(), maxSlew: DefaultMaxSlew, adjusted: now, stepAt: int64(DefaultStepThreshold)}
}

// SetStepThreshold changes how far beyond the round trips' uncertainty a
// sample's offset must stray to count as a step. Values of zero or less
// keep the current threshold.
func (o *Offset) SetStepThreshold(d time.Duration) {
	if d > 0 {
		o.mu.Lock()
		o.stepAt = int64(d)
		o.mu.Unlock()
	}
}

// OnStep sets the function told of every step, on the goroutine that
// observed it, before Observe returns and outside Offset's lock (it may call
// Map and Now). Nil means nobody.
func (o *Offset) OnStep(fn func(Step)) {
	o.mu.Lock()
	o.onStep = fn
	o.mu.Unlock()
}

// Steps counts the steps recognised.
func (o *Offset) Steps() uint64 { return o.steps.Load() }

// SetMaxSlew changes how fast the applied offset may fall, as a fraction of
// elapsed time (0.05 is 5%). Values outside (0, 1] keep the current rate.
func (o *Offset) SetMaxSlew(rate float64) {
	if rate > 0 && rate <= 1 {
		o.mu.Lock()
		o.maxSlew = rate
		o.mu.Unlock()
	}
}

// Observe feeds one round trip: the local time the request was sent, the
// server TIME it returned, and the local time the answer arrived. Samples
// whose round trip is negative (a broken local clock) are ignored.
func (o *Offset) Observe(sent, server, received time.Time) {
	rtt := int64(received.Sub(sent))
	if rtt < 0 {
		return
	}
	// The server read its clock somewhere in the round trip: assume the
	// middle, which errs by at most rtt/2.
	mid := o.local(sent) + rtt/2
	s := sample{offset: server.UnixNano() - mid, rtt: rtt}

	o.mu.Lock()
	if o.isStep(s) {
		before := o.applied.Load()
		o.count, o.next = 0, 0
		o.add(s)
		o.applied.Store(o.target)
		o.adjusted = received
		o.floor.Store(0) // Now starts again from the new mapping
		o.steps.Add(1)
		step := Step{By: time.Duration(o.target - before), Local: received, Mapped: o.Map(received)}
		fn := o.onStep
		o.mu.Unlock()
		if fn != nil {
			fn(step)
		}
		return
	}
	o.add(s)
	o.adjust(received)
	o.mu.Unlock()
}

// isStep reports whether s lies further from the estimate than the two
// round trips explain, by more than the step threshold. It runs under o.mu.
func (o *Offset) isStep(s sample) bool {
	if !o.known.Load() || o.count == 0 {
		return false
	}
	diff := s.offset - o.target
	if diff < 0 {
		diff = -diff
	}
	return diff > s.rtt/2+o.uncertainty.Load()+o.stepAt
}

// add puts s in the filter and makes the best sample the target. It runs
// under o.mu.
func (o *Offset) add(s sample) {
	o.samples[o.next] = s
	o.next = (o.next + 1) % filterSize
	if o.count < filterSize {
		o.count++
	}
	best := o.samples[0]
	for _, c := range o.samples[1:o.count] {
		if c.rtt < best.rtt {
			best = c
		}
	}
	o.target = best.offset
	o.uncertainty.Store(best.rtt / 2)
}

// adjust moves the applied offset toward the target: at once when it grows
// or when nothing was known before, by at most maxSlew of the elapsed time
// when it falls. It runs under o.mu.
func (o *Offset) adjust(now time.Time) {
	cur := o.applied.Load()
	next := o.target
	if o.known.Load() && next < cur {
		step := int64(o.maxSlew * float64(now.Sub(o.adjusted)))
		next = max(o.target, cur-max(step, 0))
	}
	o.adjusted = now
	o.applied.Store(next)
	o.known.Store(true)
}

// local is the monotonic reading of t as Unix ns.
func (o *Offset) local(t time.Time) int64 { return o.baseUnix + int64(t.Sub(o.base)) }

// Map returns the Redis time, in Unix ns, corresponding to the local reading
// t. It is lock-free and allocation-free: the hot path calls it. Readers that
// need a value that never steps back use Now.
func (o *Offset) Map(t time.Time) int64 { return o.local(t) + o.applied.Load() }

// MapNow is Map(time.Now()), reading only the monotonic clock: the time
// since the reading Offset was created with, which must be the real clock's
// (it carries a monotonic reading). time.Now reads the wall clock as well,
// which Map never uses; MapNow skips that read, about half of time.Now's
// cost (BenchmarkMapNow). Like Map, it is lock-free and allocation-free.
func (o *Offset) MapNow() int64 { return o.baseUnix + int64(time.Since(o.base)) + o.applied.Load() }

// Now is Map with a floor: it never returns less than it returned before,
// across all callers, but for a step (see Offset), after which it starts
// again from Map.
func (o *Offset) Now(t time.Time) int64 {
	v := o.Map(t)
	for {
		f := o.floor.Load()
		if v <= f {
			return f
		}
		if o.floor.CompareAndSwap(f, v) {
			return v
		}
	}
}

// Estimate returns the current best offset (server minus local), its
// uncertainty (half the round trip of the sample it came from), and whether
// any sample has been seen.
func (o *Offset) Estimate() (offset, uncertainty time.Duration, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return time.Duration(o.target), time.Duration(o.uncertainty.Load()), o.known.Load()
}

// Applied returns the offset Map adds right now, which trails Estimate while
// slewing down.
func (o *Offset) Applied() time.Duration { return time.Duration(o.applied.Load()) }
