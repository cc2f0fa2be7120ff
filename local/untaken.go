package local

// Untaken returns how many (key, limit) states hold spend or demand that no
// take has taken yet, and how much spend of evicted keys and rolled-over
// windows waits for the reconciler (a key may count twice: once for its
// state and once for a window it left). It visits every key, locking one
// shard at a time: for Close's account of what it could not report, not
// for a hot path.
func (e *Engine) Untaken() int {
	n := 0
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for _, en := range sh.keys.m {
			if en.spent != 0 || en.hits != 0 {
				n++
			}
		}
		for _, xs := range sh.extras {
			for _, en := range xs {
				if en.spent != 0 || en.hits != 0 {
					n++
				}
			}
		}
		n += len(sh.orphans)
		sh.mu.Unlock()
	}
	return n
}
