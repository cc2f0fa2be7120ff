package local

import "github.com/hybridlimit/hybridlimit/limit"

// entry is one key's state. It is 48 bytes, one allocation size class, which
// with the LRU's own element and map slot keeps a million keys well under
// 200 MiB; do not grow it without measuring (BenchmarkMemoryPerKey).
type entry struct {
	st    [3]int64 // algorithm state: each algorithm's file says what the words hold
	spent int64    // admitted since the reconciler last took it (window algorithms: in window st[0])
	pol   *policy  // the limit of the last decision, interned per shard
	hits  uint32   // demand asked for since the last take, admitted or not (saturating)
	share Share    // the share the state is expressed in
	flags uint16   // flagDirty | nodes active on the key at the last reconcile (0: unknown)
}

const (
	flagDirty = 1 << 15       // on the shard's dirty list
	maxNodes  = flagDirty - 1 // the node count a flags word holds
)

func (en *entry) dirty() bool { return en.flags&flagDirty != 0 }

func (en *entry) setDirty(d bool) {
	if d {
		en.flags |= flagDirty
	} else {
		en.flags &^= flagDirty
	}
}

func (en *entry) nodes() int { return int(en.flags & maxNodes) }

func (en *entry) setNodes(n int) {
	en.flags = en.flags&flagDirty | uint16(min(max(n, 0), maxNodes))
}

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
