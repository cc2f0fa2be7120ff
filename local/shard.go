package local

import (
	"strings"
	"sync"

	"github.com/hybridlimit/hybridlimit/limit"
)

// maxInternedPolicies bounds each shard's table of distinct limits; beyond it
// an entry gets a policy of its own rather than growing the table forever.
const maxInternedPolicies = 1024

// maxExtras bounds the limits one key may hold besides its first; a key given
// more loses the least recently added one (evicted as any key is).
const maxExtras = 16

// dueRef is an entry the reconciler should take this round: its spend passed
// the report threshold, or a request was denied. It holds the entry itself,
// so an entry evicted meanwhile is still found (with its spend moved to the
// orphans).
type dueRef struct {
	key string
	en  *entry
}

// shard is one lock's worth of keys: a keyTable under the shard's own
// lock, padded so that neighbouring shards' locks do not share a cache line.
//
// A key's first limit lives in the table; further limits on the same key
// live in extras and follow their key's entry (recency, eviction).
type shard struct {
	mu       sync.Mutex
	now      int64 // the latest time seen: the shard's clock never goes back
	sealed   bool  // no more decisions: the engine is being flushed for good
	e        *Engine
	keys     *keyTable
	extras   map[string][]*entry
	policies map[limit.Limit]*policy
	due      []dueRef     // entries for the reconciler's next take
	orphans  []Spend      // spend of evicted keys and rolled-over windows
	maxOrph  int          // orphans kept before spend is dropped (and counted)
	logs     []*eventLog  // sliding window logs, by slot (entry.st[1]-1)
	freeLogs []int64      // free slots of logs
	zones    *limit.Zones // the engine's: resolves calendar limits' zones
	// evictions remembers keys evicted before they were fresh.
	evictions evictions
	_         [40]byte
}

func (sh *shard) init(e *Engine, size, evicted int, zones *limit.Zones) error {
	sh.e = e
	sh.evictions = newEvictions(evicted)
	sh.zones = zones
	sh.policies = make(map[limit.Limit]*policy)
	sh.extras = make(map[string][]*entry)
	sh.maxOrph = max(size, 64)
	sh.keys = newKeyTable(size, sh.evicted)
	return nil
}

// clamp returns now, or the shard's latest time if now is earlier, and
// advances the shard's time: what a decision (or a change of state) does.
func (sh *shard) clamp(now int64) int64 {
	if now < sh.now {
		return sh.now
	}
	sh.now = now
	return now
}

// at is clamp without advancing the shard's time: for the reconciler's
// bookkeeping (taking spend, sweeping), whose clock may run ahead of the
// deciders' before its first round trip to Redis has aligned them. A
// bookkeeping call that advanced it would hold every decision on the shard
// at that time, buckets frozen, until the deciders' clock caught up.
func (sh *shard) at(now int64) int64 { return max(now, sh.now) }

// lookup returns the entry of (key, lim), creating it in share s if absent.
// A new entry starts fresh, unless the records of evicted keys say the key
// was evicted before it was fresh: then it starts as spent as the record
// bounds it. lim is validated whenever a new entry is made. h is the key's
// hash. It marks the key used (keyTable).
func (sh *shard) lookup(key string, h uint64, lim limit.Limit, s Share) (*entry, error) {
	return sh.find(key, h, &lim, s)
}

// find is lookup with the limit read through a pointer (not kept, not
// changed): the decision's hot path.
func (sh *shard) find(key string, h uint64, limp *limit.Limit, s Share) (*entry, error) {
	en, ok := sh.keys.Get(key)
	if ok && en.pol.is(limp) {
		return en, nil
	}
	if ok && en.has(flagExtras) {
		for _, x := range sh.extras[key] {
			if x.pol.is(limp) {
				return x, nil
			}
		}
	}
	lim := limp.Canonical() // PerSecond(10) and PerSecond(10).WithBurst(10) are one limit
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	pol, err := sh.intern(lim)
	if err != nil {
		return nil, err
	}
	x := &entry{pol: pol, share: s}
	sh.claim(x, key, lim)
	sh.restore(x, h, sh.now)
	if ok {
		// Another limit on a key already held: an extra of its own state.
		x.set(flagExtra)
		en.set(flagExtras)
		list := sh.extras[key]
		if len(list) >= maxExtras {
			sh.drop(key, list[0])
			list = append(list[:0], list[1:]...)
		}
		sh.extras[key] = append(list, x)
		sh.e.keys.Add(1)
		return x, nil
	}
	if sh.e.keys.Load() >= sh.e.maxKeys {
		if _, _, ok := sh.keys.RemoveOldest(); ok { // the engine is full: make room in this shard
			sh.e.evictions.Add(1)
		}
	}
	// A copy of its own: the caller's key may be a slice of a larger buffer
	// that the limiter must not keep alive.
	if sh.keys.Add(strings.Clone(key), x) { // the shard was full
		sh.e.evictions.Add(1)
	}
	sh.e.keys.Add(1)
	return x, nil
}

// claim sets a new entry of key under lim as the protocol's claims say
// (Engine.SetClaimed): a contested key is decided in the share Redis
// accounts this node for, none until it grants one. A grant the node holds
// of a key it no longer had (evicted, or made while its op was on its way)
// has lost its state: the entry starts wholly spent, unless the record of
// its eviction bounds it better (restore, after); fresh, it would admit
// again what the grant had admitted (a home of 1 an hour, evicted under a
// flood of keys, admitted a second request at once). The shard is locked.
func (sh *shard) claim(en *entry, key string, lim limit.Limit) {
	c := sh.e.claimed.Load()
	if c == nil || !sh.e.track {
		return
	}
	g, contested := (*c)(key, lim)
	if !contested {
		return
	}
	en.set(flagContested)
	en.share = max(g, 1)
	if g == 0 && sh.e.asks {
		en.set(flagEmpty)
	}
	if g > 0 {
		startSpent(en, sh.now)
	}
}

// startSpent makes a new entry's state wholly spent at now.
func startSpent(en *entry, now int64) {
	switch en.pol.lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		en.st[0] = now
		en.ex, en.exSince = now+en.pol.tolerance, now // no shadow fresher than the state
	case limit.FixedWindow, limit.SlidingWindowCounter:
		en.st[0] = en.pol.index(now)
	}
	spend(en)
}

// restore starts a new entry as spent as the record of its eviction bounds
// its key at now: a key evicted before it was fresh does not come back with
// a burst it had used.
func (sh *shard) restore(en *entry, h uint64, now int64) {
	freshAt, frac, ok := sh.evictions.bound(limitHash(h, en.pol.lim), now)
	if !ok {
		return
	}
	p := en.pol
	switch p.lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		en.st[0] = min(now+int64(frac*float64(p.tolerance)), freshAt)
		en.ex, en.exSince = en.st[0], now // no shadow fresher than what the record says
	case limit.FixedWindow, limit.SlidingWindowCounter:
		w := p.index(now)
		en.st[0] = w
		c := int64(frac*float64(p.lim.Rate)+0.999999) * int64(en.share)
		if p.lim.Algorithm == limit.FixedWindow {
			en.st[1] = c
		} else {
			en.st[2] = c
		}
	case limit.SlidingWindowLog:
		n := min(int64(frac*float64(p.lim.Rate)+0.999999), p.lim.Rate)
		if n > 0 {
			l := sh.logOf(en)
			l.events = append(l.events, logEvent{at: freshAt - p.period, n: n})
			l.total = n
			en.st[0] = max(en.st[0], freshAt-p.period)
		}
	}
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

// freshness returns when en's state is what a new entry would hold (Unix
// ns), and the fraction of its limit spent at now, as the global estimate
// the state stands for.
func (sh *shard) freshness(en *entry, now int64) (freshAt int64, frac float64) {
	p := en.pol
	switch p.lim.Algorithm {
	case limit.FixedWindow:
		if fixedFresh(&en.st, now, p) {
			return 0, 0
		}
		_, end := p.bounds(en.st[0])
		return end, float64(en.st[1]) / float64(int64(en.share)*p.lim.Rate)
	case limit.SlidingWindowCounter:
		if slidingFresh(&en.st, now, p) {
			return 0, 0
		}
		_, end := p.bounds(en.st[0])
		if en.st[2] > 0 {
			_, end = p.bounds(en.st[0] + 1)
		}
		return end, float64(en.st[1]+en.st[2]) / float64(int64(en.share)*p.lim.Rate)
	case limit.SlidingWindowLog:
		if en.st[1] == 0 {
			return 0, 0
		}
		l := sh.logs[en.st[1]-1]
		if logFresh(l, now, p.period) {
			return 0, 0
		}
		live := l.live()
		return live[len(live)-1].at + p.period, float64(l.total) / float64(p.lim.Rate)
	default:
		if en.st[0] <= now {
			return 0, 0
		}
		return en.st[0], float64(en.st[0]-now) / float64(p.tolerance)
	}
}

// fresh reports whether en's state at now is what a new entry would hold,
// so forgetting the key loses nothing.
func (sh *shard) fresh(en *entry, now int64) bool {
	at, _ := sh.freshness(en, now)
	return at == 0
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
		sh.orphan(Spend{Key: key, Limit: en.pol.lim, Spent: int64(en.spent), Charge: int64(en.spent),
			Window: en.st[0], Since: sh.e.sinceOf(en, now), Degraded: en.has(flagDegraded)})
		en.spent = 0
	}
	if en.pol.lim.Algorithm == limit.FixedWindow {
		rollFixed(&en.st, w)
	} else {
		rollSliding(&en.st, w)
	}
	return w
}

// record notes a decision's demand, and its spend if admitted, and puts the
// entry on the due list once its spend reaches the report threshold or a
// request was denied.
func (sh *shard) record(key string, en *entry, n int64, allowed, degraded bool, now int64) {
	if en.spent == 0 && en.hits == 0 || sh.e.asks {
		en.since = tick(now) // Asks mode: when it was last asked for
	}
	en.hits = satAdd32(en.hits, n)
	if allowed {
		if int64(en.spent)+n > maxSpent {
			sh.orphan(Spend{Key: key, Limit: en.pol.lim, Spent: int64(en.spent), Charge: int64(en.spent),
				Window: en.st[0], Since: sh.e.sinceOf(en, now), Degraded: en.has(flagDegraded)})
			en.spent = 0
		}
		en.spent += uint32(n)
	} else {
		en.set(flagPressure)
	}
	if degraded {
		en.set(flagDegraded)
	}
	if !sh.e.asks && !en.has(flagDue) && (!allowed || (sh.e.spendDue || en.has(flagContested)) && int64(en.spent) >= reportAt(en)) {
		en.set(flagDue)
		if len(sh.due) >= 2*sh.keys.Len()+dueKeep {
			sh.compactDue()
		}
		sh.due = append(sh.due, dueRef{key: key, en: en})
	}
}

// compactDue drops from the due list the entries no longer due: those
// evicted since (an evicted entry is not due), or forgotten. With no take
// for a while (the breaker open through an outage) and keys coming and
// going, the list would otherwise grow with the traffic; compacted, it
// holds at most the keys the shard holds, twice over.
func (sh *shard) compactDue() {
	kept := sh.due[:0]
	for _, d := range sh.due {
		if d.en.has(flagDue) {
			kept = append(kept, d)
		}
	}
	clear(sh.due[len(kept):])
	sh.due = kept
}

// maxSpent is the most an entry's spent word holds; beyond it the spend moves
// to the orphans first.
const maxSpent = 1<<32 - 1

// reportAt is the spend at which an entry is due for a report: half the
// node's share of the limit's capacity, at least one request. Below it the
// node decides alone; the accuracy bound counts at most this much unreported
// spend per node and key (docs/accuracy.md).
func reportAt(en *entry) int64 {
	return max((int64(en.share)*en.pol.capacity)>>16, 1)
}

// orphan keeps spend whose entry no longer holds it, for the reconciler, up
// to the shard's bound; beyond it the weight is counted as lost. An engine
// that keeps no such spend (Config.KeepOrphans off) forgets it.
func (sh *shard) orphan(s Spend) {
	if s.Spent == 0 && s.Hits == 0 || !sh.e.keepOrphans {
		return
	}
	s.Orphan = true
	if len(sh.orphans) >= sh.maxOrph {
		sh.e.dropped.Add(uint64(s.Spent))
		return
	}
	sh.orphans = append(sh.orphans, s)
}

// drop forgets one entry (evicted, or an extra pushed out): its untaken spend
// goes to the orphans, its state to the shard's records of evictions when it is not fresh.
func (sh *shard) drop(key string, en *entry) {
	now := sh.now
	if en.spent != 0 || en.hits != 0 {
		charge := int64(en.spent)
		if en.has(flagDegraded) {
			charge = min(charge, sh.e.privateLevel(en, now))
		}
		sh.orphan(Spend{Key: key, Limit: en.pol.lim, Spent: int64(en.spent), Hits: int64(en.hits), Charge: charge,
			Window: en.st[0], Since: sh.e.sinceOf(en, now), Degraded: en.has(flagDegraded)})
		en.spent, en.hits = 0, 0
	}
	if freshAt, frac := sh.freshness(en, now); freshAt != 0 {
		if sh.evictions.record(limitHash(sh.e.hash(key), en.pol.lim), freshAt, frac, now) {
			sh.e.forgotten.Add(1)
		}
	}
	en.clear(flagDue | flagPressure | flagDegraded)
	sh.freeLog(en)
	sh.e.keys.Add(-1)
}

// evicted is the key table's eviction callback, run under the shard's lock:
// the key and every extra limit it holds are dropped.
func (sh *shard) evicted(key string, en *entry) {
	if en.has(flagExtras) {
		for _, x := range sh.extras[key] {
			sh.drop(key, x)
		}
		delete(sh.extras, key)
	}
	sh.drop(key, en)
}
