package local

import "github.com/hybridlimit/hybridlimit/limit"

// entry is one (key, limit)'s state. It is 64 bytes, one allocation size
// class, which with its key's map slot and place in the key table's queue
// makes a key cost about 155 bytes (docs/benchmarks.md, "Memory: a million keys"); do not
// grow it without measuring (BenchmarkMemoryPerKey,
// TestMemoryPerKeyUnderAFlood).
type entry struct {
	st [3]int64 // algorithm state: each algorithm's file says what the words hold
	// ex and exSince are a token bucket's shadow in Asks mode (hold.go):
	// the theoretical arrival time one exact bucket holding the whole limit
	// would have if this node alone admitted, since exSince, when this
	// node's share was last full.
	ex, exSince int64
	pol         *policy // the limit this state belongs to, interned per shard
	spent       uint32  // admitted since the reconciler last took it (window algorithms: in window st[0])
	hits        uint32  // demand asked for since the last take, admitted or not (saturating)
	since       uint32  // engine ticks (ms) when spent and hits began to accumulate
	share       Share   // the share the state is expressed in
	flags       uint16  // see the flag constants
}

// Entry flags.
const (
	flagDue       = 1 << 0 // on the shard's due list
	flagPressure  = 1 << 1 // a request was denied or needed Redis since the last take
	flagDegraded  = 1 << 2 // spent while degraded since the last take
	flagFault     = 1 << 3 // Redis refuses this key's state (a key of another type): decide under the fallback
	flagExtra     = 1 << 4 // a second (or later) limit on its key: held in the shard's extras, not the key table
	flagExtras    = 1 << 5 // the key has extras (set on the key table's entry)
	flagContested = 1 << 6 // the key is contested: its share is the reconciler's to set, not the fleet's even split
	flagEmpty     = 1 << 7 // contested, and this node holds none of it (Asks mode): every request is short
	flagOwed      = 1 << 8 // admitted while degraded in a share the store does not account (Asks mode): report it

	flagUsed = 1 << 15 // looked up since a scan of its shard's keys last passed it (keyTable); on a key's first entry
)

func (en *entry) has(f uint16) bool { return en.flags&f != 0 }
func (en *entry) set(f uint16)      { en.flags |= f }
func (en *entry) clear(f uint16)    { en.flags &^= f }

// setShare re-expresses the state in share s, keeping the global estimate it
// stands for.
func (en *entry) setShare(s Share) {
	if s == en.share {
		return
	}
	switch en.pol.lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		en.st[1] = 0 // the interval is recomputed for the new share
	case limit.FixedWindow:
		en.st[1] = rescale(en.st[1], en.share, s)
	case limit.SlidingWindowCounter:
		en.st[1] = rescale(en.st[1], en.share, s)
		en.st[2] = rescale(en.st[2], en.share, s)
	}
	en.share = s
}

// satAdd32 adds n to a saturating demand counter.
func satAdd32(c uint32, n int64) uint32 {
	const maxU32 = 1<<32 - 1
	if n >= int64(maxU32-c) {
		return maxU32
	}
	return c + uint32(n)
}
