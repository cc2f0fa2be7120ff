package local

import (
	"strings"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/hybridlimit/hybridlimit/limit"
)

// recencySample is how often a lookup refreshes the key's place in the LRU:
// one lookup in recencySample per shard moves its key to the front. A key in
// use is refreshed all but surely (after k uses the odds it never was are
// (7/8)^k), at an eighth of the cost of moving on every decision.
const recencySample = 8

// maxInternedPolicies bounds each shard's table of distinct limits; beyond it
// an entry gets a policy of its own rather than growing the table forever.
const maxInternedPolicies = 1024

// dirtyRef is a key with spend or demand not yet taken. It holds the entry
// itself, so an entry evicted from the LRU keeps its spend until it is taken.
type dirtyRef struct {
	key string
	en  *entry
}

// shard is one lock's worth of keys: an unlocked LRU under the shard's own
// lock, padded so that neighbouring shards' locks do not share a cache line.
type shard struct {
	mu       sync.Mutex
	now      int64  // the latest time seen: the shard's clock never goes back
	lookups  uint32 // counts lookups, to sample which ones refresh recency
	keys     *lru.LRU[string, *entry]
	policies map[limit.Limit]*policy
	dirty    []dirtyRef   // entries with spend or demand since the last take
	orphans  []Spend      // spend of a window that rolled over or a limit that changed
	zones    *limit.Zones // the engine's: resolves calendar limits' zones
	logs     []*eventLog  // sliding window logs, by slot (entry.st[1]-1)
	freeLogs []int64      // free slots of logs
	_        [48]byte
}

func (sh *shard) init(size int, zones *limit.Zones) error {
	sh.policies = make(map[limit.Limit]*policy)
	sh.zones = zones
	keys, err := lru.NewLRU(size, sh.evicted)
	sh.keys = keys
	return err
}

// clamp returns now, or the shard's latest time if now is earlier.
func (sh *shard) clamp(now int64) int64 {
	if now < sh.now {
		return sh.now
	}
	sh.now = now
	return now
}

// lookup returns key's entry, creating it in share s if absent, and brings
// it to lim: a new algorithm or period starts the state afresh. lim is
// validated whenever it differs from the entry's.
//
// Most lookups peek rather than get: moving the key to the front of the LRU
// on every decision costs more than the decision itself (cache misses on the
// list neighbours), so only one in recencySample does.
func (sh *shard) lookup(key string, lim limit.Limit, s Share) (*entry, error) {
	var en *entry
	var ok bool
	if sh.lookups++; sh.lookups%recencySample == 0 {
		en, ok = sh.keys.Get(key)
	} else {
		en, ok = sh.keys.Peek(key)
	}
	if ok && en.pol.lim == lim {
		return en, nil
	}
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	pol, err := sh.intern(lim)
	if err != nil {
		return nil, err
	}
	if !ok {
		en = &entry{pol: pol, share: s}
		// A copy of its own: the caller's key may be a slice of a larger
		// buffer that the limiter must not keep alive.
		sh.keys.Add(strings.Clone(key), en)
		return en, nil
	}
	old := en.pol.lim
	if old.Algorithm != lim.Algorithm || old.Period != lim.Period || old.Calendar != lim.Calendar || old.Zone != lim.Zone {
		sh.orphan(key, en)
		sh.freeLog(en)
		en.st = [3]int64{}
	} else if lim.Algorithm.IsBucket() {
		en.st[1] = 0 // a new rate: recompute the interval
	}
	en.pol = pol
	return en, nil
}

// intern returns the shard's shared policy for lim, or why lim has none (a
// calendar limit's unknown zone).
func (sh *shard) intern(lim limit.Limit) (*policy, error) {
	if p, ok := sh.policies[lim]; ok {
		return p, nil
	}
	p, err := newPolicy(lim, sh.zones)
	if err != nil {
		return nil, err
	}
	if len(sh.policies) < maxInternedPolicies {
		sh.policies[lim] = p
	}
	return p, nil
}

// logOf returns en's sliding window log, giving it a slot on first use.
func (sh *shard) logOf(en *entry) *eventLog {
	if en.st[1] == 0 {
		if n := len(sh.freeLogs); n > 0 {
			en.st[1] = sh.freeLogs[n-1] + 1
			sh.freeLogs = sh.freeLogs[:n-1]
			sh.logs[en.st[1]-1] = &eventLog{}
		} else {
			sh.logs = append(sh.logs, &eventLog{})
			en.st[1] = int64(len(sh.logs))
		}
	}
	return sh.logs[en.st[1]-1]
}

// freeLog releases en's log slot, if it has one.
func (sh *shard) freeLog(en *entry) {
	if en.pol.lim.Algorithm != limit.SlidingWindowLog || en.st[1] == 0 {
		return
	}
	sh.logs[en.st[1]-1] = nil
	sh.freeLogs = append(sh.freeLogs, en.st[1]-1)
	en.st[1] = 0
}

// fresh reports whether en's state at now is what a new entry would hold,
// so forgetting the key loses nothing.
func (sh *shard) fresh(en *entry, now int64) bool {
	p := en.pol
	switch p.lim.Algorithm {
	case limit.FixedWindow:
		return fixedFresh(&en.st, now, p)
	case limit.SlidingWindowCounter:
		return slidingFresh(&en.st, now, p)
	case limit.SlidingWindowLog:
		return en.st[1] == 0 || logFresh(sh.logs[en.st[1]-1], now, p.period)
	default:
		return bucketFresh(&en.st, now)
	}
}

// rollWindow moves a window algorithm's state to now's window, keeping spend
// of the window it leaves as an orphan for the reconciler. It returns the
// window now falls in.
func (sh *shard) rollWindow(key string, en *entry, now int64) int64 {
	w := windowIndex(&en.st, now, en.pol)
	if w == en.st[0] {
		return w
	}
	if en.spent > 0 {
		sh.orphans = append(sh.orphans, Spend{Key: key, Limit: en.pol.lim, Spent: en.spent, Window: en.st[0]})
		en.spent = 0
	}
	if en.pol.lim.Algorithm == limit.FixedWindow {
		rollFixed(&en.st, w)
	} else {
		rollSliding(&en.st, w)
	}
	return w
}

// record notes a decision's demand, and its spend if admitted.
func (sh *shard) record(key string, en *entry, n int64, allowed bool) {
	en.hits = satAdd32(en.hits, n)
	if allowed {
		en.spent += n
	}
	if !en.dirty() {
		en.setDirty(true)
		sh.dirty = append(sh.dirty, dirtyRef{key: key, en: en})
	}
}

// orphan moves en's untaken spend and demand to the shard's orphans.
func (sh *shard) orphan(key string, en *entry) {
	if en.spent == 0 && en.hits == 0 {
		return
	}
	sh.orphans = append(sh.orphans, Spend{Key: key, Limit: en.pol.lim, Spent: en.spent, Hits: int64(en.hits), Window: en.st[0]})
	en.spent, en.hits = 0, 0
	en.setDirty(false)
}

// evicted is the LRU's eviction callback, run under the shard's lock. Spend
// not yet taken needs nothing here: the dirty list still holds the entry.
func (sh *shard) evicted(_ string, en *entry) { sh.freeLog(en) }
