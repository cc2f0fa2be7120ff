package local

import "github.com/hybridlimit/hybridlimit/limit"

// Forget drops the state of (key, lim), with the spend and demand not yet
// taken (TakeSpend will not report them), and any record of its eviction: the key starts afresh under lim, as if it had never been
// seen. It reports whether there was anything to forget. The key's other
// limits are left as they are. It is what a Reset does in memory.
func (e *Engine) Forget(key string, lim limit.Limit) bool {
	if limit.CheckKey(key) != nil {
		return false
	}
	lim = lim.Canonical()
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	found := false
	// Spend of a window that rolled over, or of an evicted key.
	kept := sh.orphans[:0]
	for _, o := range sh.orphans {
		if o.Key == key && o.Limit == lim {
			found = true
			continue
		}
		kept = append(kept, o)
	}
	clear(sh.orphans[len(kept):])
	sh.orphans = kept
	sh.evictions.forget(limitHash(h, lim))
	en := sh.peek(key, lim)
	if en == nil {
		return found
	}
	// The due list may still hold the entry: not due, TakeDue skips it.
	en.spent, en.hits = 0, 0
	en.clear(flagDue | flagPressure | flagDegraded)
	en.st = [3]int64{}
	sh.freeLog(en)
	if !en.has(flagExtra) && !en.has(flagExtras) {
		sh.keys.Remove(key) // fresh now: nothing to record
	}
	return true
}

// Restart starts the state of (key, lim) afresh (a full bucket, an empty
// window) and keeps the rest: the share it is decided in, and the spend and
// demand not yet taken, which still go to the ledger. It is what a node does
// when Redis tells it the key was reset elsewhere in the fleet. It reports
// whether the engine held the key.
func (e *Engine) Restart(now int64, key string, lim limit.Limit) bool {
	if limit.CheckKey(key) != nil {
		return false
	}
	sh := e.shardOf(e.hash(key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil {
		return false
	}
	now = sh.clamp(now)
	if en.pol.lim.Algorithm.IsBucket() {
		en.st[0], en.st[2] = 0, 0 // st[1] caches the share's interval
		en.ex, en.exSince = 0, now
	} else {
		en.st = [3]int64{en.pol.index(now), 0, 0}
	}
	sh.freeLog(en)
	return true
}
