package local

import "github.com/hybridlimit/hybridlimit/limit"

// Spend is what one node spent on one (key, limit) since it was last taken:
// the unit of reconciliation.
type Spend struct {
	// Key and Limit identify the global state the spend belongs to.
	Key   string
	Limit limit.Limit
	// Spent is the weight admitted.
	Spent int64
	// Charge is the part of Spent that still weighs on the limit: Spent,
	// except for spend made while degraded, which counts at the time it was
	// made: only what of it has not refilled by the take (this node's own
	// level in its degraded share) is charged, so a client that stayed within
	// its limit through an outage is not charged for it again afterwards.
	Charge int64
	// Hits is the weight asked for, admitted or not: the node's demand.
	Hits int64
	// Window is, for the window algorithms, the window Spent was counted in.
	Window int64
	// Since is when the spend and demand began to accumulate (Unix ns, to
	// the millisecond): Hits over the time since is the node's demand rate.
	// In Asks mode it is when the key was last asked for instead.
	Since int64
	// Pressure reports that a request was denied, or was too heavy for the
	// node's share, since the last take: the node wants more of the limit.
	Pressure bool
	// Degraded reports that some of the spend was made while degraded.
	Degraded bool
	// Due reports that the spend reached the key's report threshold: half
	// the node's share of the limit's capacity.
	Due bool
	// Orphan reports spend its entry no longer holds: of a key evicted from
	// memory, or of a window left behind.
	Orphan bool
}

// dueKeep is the due-list capacity a shard keeps between takes; a larger
// list left by a burst of keys is released.
const dueKeep = 256

// TakeDue appends to dst, and resets, the spend of the keys due for a report
// at now: those whose unreported spend reached the report threshold, and
// those with a denied or escalated request; then the spend of evicted keys
// and of windows that rolled over. Keys spent on below the threshold keep
// their spend in memory, where it costs nothing, until it grows, the key is
// evicted, or TakeSpend takes everything. It locks one shard at a time,
// briefly, so deciders on other shards never wait.
func (e *Engine) TakeDue(now int64, dst []Spend) []Spend {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		t := sh.at(now)
		for _, d := range sh.due {
			if d.en.has(flagDue) {
				dst = e.take(dst, d.key, d.en, t)
			}
		}
		if cap(sh.due) > dueKeep {
			sh.due = nil
		} else {
			clear(sh.due) // drop the strings for the GC; keep the capacity
			sh.due = sh.due[:0]
		}
		dst = sh.takeOrphans(dst)
		sh.mu.Unlock()
	}
	return dst
}

// TakeSpend appends to dst, and resets, every untaken spend: every key's,
// due or not, and the orphans'. It walks every key: for a final flush, not
// for every round.
func (e *Engine) TakeSpend(dst []Spend) []Spend {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		t := sh.now
		for key, en := range sh.keys.m {
			if en.spent != 0 || en.hits != 0 {
				dst = e.take(dst, key, en, t)
			}
			if en.has(flagExtras) {
				for _, x := range sh.extras[key] {
					if x.spent != 0 || x.hits != 0 {
						dst = e.take(dst, key, x, t)
					}
				}
			}
		}
		clear(sh.due)
		sh.due = sh.due[:0]
		dst = sh.takeOrphans(dst)
		sh.mu.Unlock()
	}
	return dst
}

// TakeKey appends to dst, and resets, the untaken spend of (key, lim), if
// the engine holds it and it has any.
func (e *Engine) TakeKey(now int64, key string, lim limit.Limit, dst []Spend) []Spend {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if en := sh.peek(key, lim); en != nil && (en.spent != 0 || en.hits != 0 || en.has(flagPressure)) {
		dst = e.take(dst, key, en, sh.at(now))
	}
	return dst
}

// take appends en's spend to dst and resets it. The shard is locked.
func (e *Engine) take(dst []Spend, key string, en *entry, now int64) []Spend {
	s := Spend{Key: key, Limit: en.pol.lim, Spent: int64(en.spent), Charge: int64(en.spent), Hits: int64(en.hits),
		Window: en.st[0], Since: e.sinceOf(en, now), Pressure: en.has(flagPressure), Degraded: en.has(flagDegraded),
		Due: (e.spendDue || en.has(flagContested)) && int64(en.spent) >= reportAt(en)}
	if s.Degraded {
		s.Charge = min(s.Spent, e.privateLevel(en, now))
	}
	en.spent, en.hits = 0, 0
	en.clear(flagDue | flagPressure | flagDegraded)
	return append(dst, s)
}

// takeOrphans moves the shard's orphans to dst. The shard is locked.
func (sh *shard) takeOrphans(dst []Spend) []Spend {
	dst = append(dst, sh.orphans...)
	if cap(sh.orphans) > dueKeep {
		sh.orphans = nil
	} else {
		clear(sh.orphans)
		sh.orphans = sh.orphans[:0]
	}
	return dst
}

// Sweep forgets keys that are idle and fresh: their state is what a new key
// would hold, so nothing is lost (untaken spend moves to the orphans, for
// the reconciler). Keys under a lease the reconciler tracks are kept. It
// looks at up to perShard of the least recently used keys of each shard and
// returns how many it removed.
//
// A fresh key is idle when nothing was asked of it since the previous
// sweep. Where nobody takes the spend of keys decided alone (an engine that
// keeps no orphans: Async mode without a ledger), that spend only says the
// key was used: the sweep drops it and stops there, and the next sweep
// forgets the key if nothing was asked of it meanwhile.
// Without that, a key with a generous limit, always fresh, would be
// forgotten and made again between two of its requests.
func (e *Engine) Sweep(now int64, perShard int) int {
	removed := 0
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		t := sh.at(now)
		for range min(perShard, sh.keys.Len()) { // no key looked at twice in a sweep
			key, en, ok := sh.keys.Oldest()
			if !ok {
				break
			}
			if en.has(flagUsed) {
				sh.keys.Requeue() // used since its last pass: not the least recently used
				continue
			}
			if en.has(flagDue|flagContested|flagFault) || !sh.fresh(en, t) || !sh.extrasFresh(key, en, t) {
				break
			}
			if !e.keepOrphans && sh.usedSince(key, en) {
				sh.forgetUse(key, en, now) // idle by the next sweep, or used again
				break
			}
			sh.keys.RemoveOldest() // evicted: spend to the orphans
			removed++
		}
		sh.mu.Unlock()
	}
	return removed
}

// usedSince reports whether key (en and its extras) was asked for since its
// spend was last taken or forgotten. The shard is locked.
func (sh *shard) usedSince(key string, en *entry) bool {
	if en.spent != 0 || en.hits != 0 {
		return true
	}
	if en.has(flagExtras) {
		for _, x := range sh.extras[key] {
			if x.spent != 0 || x.hits != 0 {
				return true
			}
		}
	}
	return false
}

// forgetUse drops the spend and demand of key that nobody will take. The
// shard is locked.
func (sh *shard) forgetUse(key string, en *entry, now int64) {
	en.spent, en.hits, en.since = 0, 0, tick(now)
	if en.has(flagExtras) {
		for _, x := range sh.extras[key] {
			x.spent, x.hits, x.since = 0, 0, tick(now)
		}
	}
}

// extrasFresh reports whether every extra limit of key is fresh and idle.
func (sh *shard) extrasFresh(key string, en *entry, now int64) bool {
	if !en.has(flagExtras) {
		return true
	}
	for _, x := range sh.extras[key] {
		if x.has(flagDue|flagContested|flagFault) || !sh.fresh(x, now) {
			return false
		}
	}
	return true
}
