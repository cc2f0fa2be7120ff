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
// The zero value is not usable; call NewOffset. Offset is safe for
// concurrent use; Map and Now do not lock.
type Offset struct {
	base     time.Time // local reading at creation, with its monotonic clock
	baseUnix int64     // base as Unix ns
	maxSlew  float64

	mu       sync.Mutex
	samples  [filterSize]sample
	count    int // samples held, up to filterSize
	next     int // ring position of the next sample
	target   int64
	adjusted time.Time // local reading at the last adjustment

	applied     atomic.Int64 // ns added to the local reading
	uncertainty atomic.Int64 // ns, half the chosen sample's round trip
	known       atomic.Bool
	floor       atomic.Int64 // the latest value Now returned
}

type sample struct {
	offset int64
	rtt    int64
}

// NewOffset returns an estimator that knows nothing yet: until the first
// sample it maps local time to itself. now is the local reading it anchors
// the monotonic mapping to, normally time.Now().
func NewOffset(now time.Time) *Offset {
	return &Offset{base: now, baseUnix: now.UnixNano(), maxSlew: DefaultMaxSlew, adjusted: now}
}

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
	defer o.mu.Unlock()
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
	o.adjust(received)
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

// Now is Map with a floor: it never returns less than it returned before,
// across all callers.
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
