package local

import "github.com/hybridlimit/hybridlimit/limit"

// KeyLimit names one key's state: a key and one of its limits.
type KeyLimit struct {
	Key   string
	Limit limit.Limit
}

// Outgrown appends to dst the token buckets this node decided in the
// fleet's even split while it was share from (Asks mode) that are pooled
// in the even split now (one request weighs more than it) and spent at now
// (not full): what the node admitted in them, alone and in memory, the
// fleet's store never counted, and no node decides the key alone any more.
// The first op on such a key makes its contest; the node reports each so
// that the contest starts as spent as its shadow, whoever asks first. Call
// it when the fleet grows (the default share falls); it looks at every key
// the engine holds, a shard at a time.
func (e *Engine) Outgrown(now int64, from Share, dst []KeyLimit) []KeyLimit {
	to := Share(e.newKey.Load())
	if !e.asks || to >= from {
		return dst
	}
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		t := sh.at(now)
		for key, en := range sh.keys.m {
			dst = outgrownOf(dst, key, en, t, from, to)
			if en.has(flagExtras) {
				for _, x := range sh.extras[key] {
					dst = outgrownOf(dst, key, x, t, from, to)
				}
			}
		}
		sh.mu.Unlock()
	}
	return dst
}

func outgrownOf(dst []KeyLimit, key string, en *entry, now int64, from, to Share) []KeyLimit {
	p := en.pol
	if en.has(flagContested) || p.lim.Algorithm != limit.TokenBucket || en.st[0] <= now {
		return dst
	}
	if pooled(p, from) || !pooled(p, to) {
		return dst
	}
	return append(dst, KeyLimit{Key: key, Limit: p.lim})
}
