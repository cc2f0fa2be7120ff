package local

import "github.com/hybridlimit/hybridlimit/limit"

// Spend is what one node spent on one key since it was last taken: the unit
// of reconciliation.
type Spend struct {
	// Key and Limit identify the global state the spend belongs to.
	Key   string
	Limit limit.Limit
	// Spent is the weight admitted.
	Spent int64
	// Hits is the weight asked for, admitted or not: the node's demand.
	Hits int64
	// Window is, for the window algorithms, the window Spent was counted in.
	Window int64
}

// dirtyKeep is the dirty-list capacity a shard keeps between takes; a
// larger list left by a burst of new keys is released.
const dirtyKeep = 256

// TakeSpend appends to dst, and resets, the spend of every key since the last
// call, including spend whose key has since been evicted or whose window has
// rolled over. It locks one shard at a time, briefly, so deciders on other
// shards never wait.
func (e *Engine) TakeSpend(dst []Spend) []Spend {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for _, d := range sh.dirty {
			en := d.en
			if !en.dirty() {
				continue // its spend went to the orphans when its limit changed
			}
			dst = append(dst, Spend{Key: d.key, Limit: en.pol.lim, Spent: en.spent, Hits: int64(en.hits), Window: en.st[0]})
			en.spent, en.hits = 0, 0
			en.setDirty(false)
		}
		if cap(sh.dirty) > dirtyKeep {
			sh.dirty = nil
		} else {
			clear(sh.dirty) // drop the strings for the GC; keep the capacity
			sh.dirty = sh.dirty[:0]
		}
		dst = append(dst, sh.orphans...)
		clear(sh.orphans)
		sh.orphans = sh.orphans[:0]
		sh.mu.Unlock()
	}
	return dst
}

// Sweep forgets keys that are idle and fully taken: their state is what a new
// key would hold, so nothing is lost. It looks at up to perShard of the least
// recently used keys of each shard and returns how many it removed.
func (e *Engine) Sweep(now int64, perShard int) int {
	removed := 0
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		t := sh.clamp(now)
		for range perShard {
			_, en, ok := sh.keys.GetOldest()
			if !ok || en.dirty() || en.spent != 0 || !sh.fresh(en, t) {
				break
			}
			sh.keys.RemoveOldest()
			removed++
		}
		sh.mu.Unlock()
	}
	return removed
}
