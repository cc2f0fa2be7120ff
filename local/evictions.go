package local

import "math"

// evictions remembers, for one shard, the keys evicted before they were
// fresh again, so that a key coming back after eviction starts at least as
// spent as it was instead of with a fresh burst.
//
// It is a table of records, each the key's hash (with its limit mixed in),
// the time until which the key is not fresh and the fraction of its limit
// it had spent. A hash has two candidate buckets of four slots (a bucket is
// a cache line); it is looked up by its whole 64-bit hash, so a key never
// inherits another key's record: a flood of new keys cannot make a new
// client start spent. When all eight slots hold live records of other keys,
// the one that turns fresh first gives way (its loss matters least), or the
// new record is dropped if it turns fresh sooner than all; each record lost
// before it was fresh is counted (Engine.EvictionsForgotten). The table
// belongs to its shard and is used under the shard's lock; it is made on
// the first record.
type evictions struct {
	buckets []evictBucket
	mask    uint64 // len(buckets) - 1
	size    int    // buckets when made, a power of two, at least two
}

// bucketSlots is how many slots a bucket holds.
const bucketSlots = 4

// evictSlot is one record: h is the key's hash (0: empty; hashes of 0 are
// stored as 1), cell packs the Unix ms (rounded up) until which the key is
// not fresh in its high 42 bits and the fraction spent in its low 22.
type evictSlot struct {
	h    uint64
	cell uint64
}

// evictBucket is a cache line of slots.
type evictBucket [bucketSlots]evictSlot

// Packing of a record: the high 42 bits are Unix ms (until the year 2109),
// the low 22 a fraction in units of 1/fracOne (up to 256 limits' worth).
const (
	fracBits = 22
	fracOne  = 1 << 14
	fracMax  = 1<<fracBits - 1
)

// newEvictions returns a table for about slots records, made on first use.
func newEvictions(slots int) evictions {
	return evictions{size: ceilPow2(max(slots/bucketSlots, 2))}
}

// bucketsOf returns the two candidate buckets of hash h.
func (t *evictions) bucketsOf(h uint64) (*evictBucket, *evictBucket) {
	a := mix(h) & t.mask
	b := mix(h^0x9e3779b97f4a7c15) & t.mask
	if b == a {
		b = (a + 1) & t.mask
	}
	return &t.buckets[a], &t.buckets[b]
}

// find returns h's slot, or nil.
func (t *evictions) find(h uint64) *evictSlot {
	a, b := t.bucketsOf(h)
	for _, bk := range [2]*evictBucket{a, b} {
		for i := range bk {
			if bk[i].h == h {
				return &bk[i]
			}
		}
	}
	return nil
}

// fracOf converts a fraction of a limit to the fixed point, rounded up and
// capped.
func fracOf(f float64) uint64 {
	if f <= 0 || math.IsNaN(f) {
		return 0
	}
	return uint64(min(math.Ceil(f*fracOne), fracMax))
}

// record notes that the key hashing to h is not fresh until freshAt (Unix
// ns) and has spent frac of its limit. now is Unix ns. It reports whether a
// live record (this one, or the one it displaced) was lost.
func (t *evictions) record(h uint64, freshAt int64, frac float64, now int64) (lost bool) {
	if freshAt <= now {
		return false
	}
	if t.buckets == nil {
		t.buckets, t.mask = make([]evictBucket, t.size), uint64(t.size-1)
	}
	h = max(h, 1)
	at := uint64((freshAt + 999_999) / 1_000_000)
	cell := at<<fracBits | fracOf(frac)
	nowMs := uint64(now / 1_000_000)
	if s := t.find(h); s != nil {
		if old := s.cell; old>>fracBits > nowMs {
			// Still live: keep the larger of each.
			cell = max(old>>fracBits, at)<<fracBits | max(old&fracMax, cell&fracMax)
		}
		s.cell = cell
		return false
	}
	a, b := t.bucketsOf(h)
	var victim *evictSlot
	for _, bk := range [2]*evictBucket{a, b} {
		for i := range bk {
			s := &bk[i]
			if s.h == 0 || s.cell>>fracBits <= nowMs {
				*s = evictSlot{h: h, cell: cell}
				return false
			}
			if victim == nil || s.cell>>fracBits < victim.cell>>fracBits {
				victim = s
			}
		}
	}
	// Every slot live: the record fresh first gives way, if before this.
	if victim.cell>>fracBits < at {
		*victim = evictSlot{h: h, cell: cell}
	}
	return true
}

// bound returns what is known of the key hashing to h at now (Unix ns): ok
// false when nothing is, else a time (Unix ns) before which it is not fresh
// and the fraction of its limit it may have spent.
func (t *evictions) bound(h uint64, now int64) (freshAt int64, frac float64, ok bool) {
	if t.buckets == nil {
		return 0, 0, false
	}
	s := t.find(max(h, 1))
	if s == nil {
		return 0, 0, false
	}
	at := s.cell >> fracBits
	if at <= uint64(now/1_000_000) {
		return 0, 0, false
	}
	return int64(at) * 1_000_000, float64(s.cell&fracMax) / fracOne, true
}

// forget drops the record of the key hashing to h, if any.
func (t *evictions) forget(h uint64) {
	if t.buckets == nil {
		return
	}
	if s := t.find(max(h, 1)); s != nil {
		*s = evictSlot{}
	}
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
