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
// records move on to their other buckets to make room (makeRoom: cuckoo
// hashing), so that no record is lost while the table has room: tables
// three quarters full of live records lose none, where a record's two
// buckets alone lost records in a sixth of the tables of 128 slots half
// full (TestEvictionsFillBeforeForgetting). Only when no room is within
// reach does the record that turns fresh first among the eight give way
// (its loss matters least), or the new record is dropped if it turns fresh
// sooner than all; each record lost before it was fresh is counted
// (Engine.EvictionsForgotten). The table belongs to its shard and is used
// under the shard's lock; it is made on the first record.
type evictions struct {
	buckets []evictBucket
	mask    uint64 // len(buckets) - 1
	size    int    // buckets when made, a power of two, at least two
	skip    uint16 // searches for room still to skip (makeRoom, roomBackoff)
	failed  uint16 // searches the last failure skipped, doubling while failures run on; 0 once one finds room
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
	a, b := t.homes(h)
	return &t.buckets[a], &t.buckets[b]
}

// homes returns the indices of hash h's two candidate buckets, never equal.
func (t *evictions) homes(h uint64) (a, b uint64) {
	a = mix(h) & t.mask
	b = mix(h^0x9e3779b97f4a7c15) & t.mask
	if b == a {
		b = (a + 1) & t.mask
	}
	return a, b
}

// other returns the candidate bucket of hash h that is not bucket x (one of
// its two).
func (t *evictions) other(x, h uint64) uint64 {
	a, b := t.homes(h)
	if x == a {
		return b
	}
	return a
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
	// Both full: move records on to their other buckets to free a slot.
	if s := t.makeRoom(h, nowMs); s != nil {
		*s = evictSlot{h: h, cell: cell}
		return false
	}
	// Every slot within reach live: the record fresh first gives way, if
	// before this.
	if victim.cell>>fracBits < at {
		*victim = evictSlot{h: h, cell: cell}
	}
	return true
}

// roomSteps bounds the records makeRoom looks past: it takes the other
// bucket of each record in h's two, then of each record in those, and so
// on (breadth first), up to roomSteps of them. With it, of 31,250 random
// tables of 128 slots and 488 of 8,192 filled to three quarters with live
// records, none lost one (at 80%, 2 in 1,000 of the large ones lost one);
// a record's two buckets alone lost records in a sixth of the small tables
// half full, and about 15 of 4,096 in every large one
// (TestEvictionsFillBeforeForgetting).
const roomSteps = 32

// roomBackoff bounds how many records that find both their buckets full
// give way without a search after searches failed: the first failure skips
// one search, each further failure in a row twice as many, up to
// roomBackoff, and a search that finds room ends the run. A table full of
// live records (a flood of keys spent and evicted within their refill
// time) would otherwise pay a failing search (0.7 to 0.9 us, 15 to 20
// times the rest of a record) on every eviction; with it a record in a
// full table costs 15 to 30 ns more (about 80 ns against 40 to 60, on a
// shared, noisy machine). A table nearly full skips few; one that had room
// again after a run of failures skips at most roomBackoff searches before
// its next.
const roomBackoff = 64

// makeRoom frees a slot in one of the two buckets of h, both full, by
// moving a record to its other bucket, and that bucket's record to its
// other, and so on (cuckoo hashing's moves), along the shortest chain it
// finds within roomSteps that ends in a bucket with a free slot (empty, or
// a record already fresh). Every record stays in one of its two buckets, so
// find still looks in two. It returns the free slot, or nil when none is
// within reach: the table is full around h. It runs only when both of h's
// buckets are full, on an eviction, never on a decision about a key held.
func (t *evictions) makeRoom(h, nowMs uint64) *evictSlot {
	if t.skip > 0 {
		t.skip--
		return nil
	}
	// The full buckets looked in: from[i] is the one whose slot slot[i]
	// holds the record whose other bucket is bucket[i]; the first two are
	// h's. A bucket is in it once (a chain through one twice would undo a
	// move).
	var (
		bucket [roomSteps + 2]uint64
		from   [roomSteps + 2]int8
		slot   [roomSteps + 2]int8
	)
	bucket[0], bucket[1] = t.homes(h)
	from[0], from[1] = -1, -1
	n, steps := 2, 0
	for q := 0; q < n && steps < roomSteps; q++ {
		bk := &t.buckets[bucket[q]]
		for i := 0; i < bucketSlots && steps < roomSteps; i++ {
			steps++
			y := t.other(bucket[q], bk[i].h)
			if seen(bucket[:n], y) {
				continue // full, and looked in
			}
			if j := freeSlot(&t.buckets[y], nowMs); j >= 0 {
				// Move along the chain back to h's bucket, the last move first.
				hole := &t.buckets[y][j]
				for c, s := q, i; ; c, s = int(from[c]), int(slot[c]) {
					src := &t.buckets[bucket[c]][s]
					*hole = *src
					hole = src
					if from[c] < 0 {
						t.failed = 0
						return hole
					}
				}
			}
			bucket[n], from[n], slot[n] = y, int8(q), int8(i)
			n++
		}
	}
	t.failed = min(max(2*t.failed, 1), roomBackoff)
	t.skip = t.failed
	return nil
}

// seen reports whether x is among buckets.
func seen(buckets []uint64, x uint64) bool {
	for _, b := range buckets {
		if b == x {
			return true
		}
	}
	return false
}

// freeSlot returns the index of a slot of bk that is empty or holds a record
// already fresh at nowMs, or -1.
func freeSlot(bk *evictBucket, nowMs uint64) int {
	for i := range bk {
		if bk[i].h == 0 || bk[i].cell>>fracBits <= nowMs {
			return i
		}
	}
	return -1
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
