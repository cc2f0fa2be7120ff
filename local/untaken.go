package local

// Untaken returns how many keys hold spend or demand that no TakeSpend has
// taken yet (a key may count twice: once for its current window and once
// for a window it left). It locks one shard at a time, briefly.
func (e *Engine) Untaken() int {
	n := 0
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for _, d := range sh.dirty {
			if d.en.dirty() {
				n++
			}
		}
		n += len(sh.orphans)
		sh.mu.Unlock()
	}
	return n
}
