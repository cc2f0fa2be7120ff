package local

import "github.com/hybridlimit/hybridlimit/limit"

// Forget drops key's state under algorithm alg, with the spend and demand
// not yet taken (TakeSpend will not report them): the key starts afresh,
// as if it had never been seen. It reports whether there was anything to
// forget. A key held under another algorithm is left as it is. It is what
// a Reset does in memory.
func (e *Engine) Forget(key string, alg limit.Algorithm) bool {
	if limit.CheckKey(key) != nil {
		return false
	}
	sh := e.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	found := false
	// Spend of a window that rolled over, or of a limit the key had before.
	kept := sh.orphans[:0]
	for _, o := range sh.orphans {
		if o.Key == key && o.Limit.Algorithm == alg {
			found = true
			continue
		}
		kept = append(kept, o)
	}
	clear(sh.orphans[len(kept):])
	sh.orphans = kept
	en, ok := sh.keys.Peek(key)
	if !ok || en.pol.lim.Algorithm != alg {
		return found
	}
	// The dirty list may still hold the entry: not dirty, TakeSpend skips it.
	en.spent, en.hits = 0, 0
	en.setDirty(false)
	sh.keys.Remove(key) // frees a sliding window log's slot
	return true
}
