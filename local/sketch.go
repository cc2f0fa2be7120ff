package local

import (
	"math"
	"sync/atomic"
)

// sketch remembers, conservatively, the state of keys evicted before they
// were fresh again, so that a key coming back after eviction starts at least
// as spent as it was instead of with a fresh burst.
//
// It is a count-min sketch of upper bounds: two rows of cells, each cell one
// word packing a time (Unix ms, rounded up) until which something evicted
// there is not fresh, and the largest fraction of its limit it had spent.
// Recording merges with a compare-and-swap loop (a cell whose time has passed
// is replaced, else the maxima are kept), so it is lock-free and never loses
// a record. A key's bound is the tightest of its two cells; a key that was
// never evicted may share cells with one that was, and start a little spent:
// the price of never handing out a burst the key had already used.
type sketch struct {
	mask  uint64
	cells []atomic.Uint64 // two rows of mask+1 cells
}

// Packing of a cell: the high 42 bits are Unix ms (until the year 2109), the
// low 22 a fraction in units of 1/fracOne (up to 256 limits' worth).
const (
	fracBits = 22
	fracOne  = 1 << 14
	fracMax  = 1<<fracBits - 1
)

func newSketch(width int) *sketch {
	w := ceilPow2(max(width, 1024))
	return &sketch{mask: uint64(w - 1), cells: make([]atomic.Uint64, 2*w)}
}

// rows returns the two cells of hash h.
func (s *sketch) rows(h uint64) (*atomic.Uint64, *atomic.Uint64) {
	a := mix(h) & s.mask
	b := mix(h^0x9e3779b97f4a7c15) & s.mask
	return &s.cells[a], &s.cells[s.mask+1+b]
}

// mix is a 64-bit finaliser (splitmix64's): every bit of h reaches every bit
// of the result.
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// fracOf converts a fraction of a limit to the sketch's fixed point, rounded
// up and capped.
func fracOf(f float64) uint64 {
	if f <= 0 || math.IsNaN(f) {
		return 0
	}
	return uint64(min(math.Ceil(f*fracOne), fracMax))
}

// record notes that the key hashing to h is not fresh until freshAt (Unix
// ns) and has spent frac of its limit. now is Unix ns.
func (s *sketch) record(h uint64, freshAt int64, frac float64, now int64) {
	if freshAt <= now {
		return
	}
	at := uint64((freshAt + 999_999) / 1_000_000)
	f := fracOf(frac)
	nowMs := uint64(now / 1_000_000)
	a, b := s.rows(h)
	for _, c := range [2]*atomic.Uint64{a, b} {
		for {
			old := c.Load()
			oldAt, oldF := old>>fracBits, old&fracMax
			var next uint64
			if oldAt <= nowMs {
				next = at<<fracBits | f
			} else {
				next = max(oldAt, at)<<fracBits | max(oldF, f)
			}
			if next == old || c.CompareAndSwap(old, next) {
				break
			}
		}
	}
}

// bound returns what is known of the key hashing to h at now (Unix ns): ok
// false when it is surely fresh, else a time (Unix ns) before which it is not
// fresh and the fraction of its limit it may have spent. Each row is an upper
// bound; the tighter of the two is returned.
func (s *sketch) bound(h uint64, now int64) (freshAt int64, frac float64, ok bool) {
	a, b := s.rows(h)
	nowMs := uint64(now / 1_000_000)
	ca, cb := a.Load(), b.Load()
	atA, atB := ca>>fracBits, cb>>fracBits
	if atA <= nowMs || atB <= nowMs {
		return 0, 0, false // one row says fresh: every record there is
	}
	at := min(atA, atB)
	f := min(ca&fracMax, cb&fracMax)
	return int64(at) * 1_000_000, float64(f) / fracOne, true
}

// lazySketch is a sketch made on first use: an engine that never evicts a
// key before it is fresh pays nothing for it.
type lazySketch struct {
	width int
	p     atomic.Pointer[sketch]
}

func (l *lazySketch) record(h uint64, freshAt int64, frac float64, now int64) {
	if freshAt <= now {
		return
	}
	s := l.p.Load()
	if s == nil {
		l.p.CompareAndSwap(nil, newSketch(l.width))
		s = l.p.Load()
	}
	s.record(h, freshAt, frac, now)
}

func (l *lazySketch) bound(h uint64, now int64) (freshAt int64, frac float64, ok bool) {
	if s := l.p.Load(); s != nil {
		return s.bound(h, now)
	}
	return 0, 0, false
}
