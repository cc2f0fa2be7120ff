package reconcile

import (
	"github.com/hybridlimit/hybridlimit/limit"
)

// NextSeq returns a sequence number for a sync decision of this node: they
// grow, across restarts too.
func (r *Sync) NextSeq() int64 { return r.seq.Add(1) }

// Uncertain notes that the sync decision seq, of weight n on (key, lim),
// timed out, so whether Redis applied it is unknown, and that the node
// decided it again in memory and counted it there: the report that carries
// that spend names seq, and Redis does not apply it twice. Only the first
// such decision per key before a report is named; a second one that also
// reached Redis is counted twice (conservative), and the log says so.
func (r *Sync) Uncertain(key string, lim limit.Limit, seq, n int64) {
	start, rnow := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counters.get(keyOf(key, lim, windowOf(lim, rnow)), start)
	if c == nil {
		return
	}
	if c.uncertainSeq != 0 {
		r.log.Warn("reconcile: a second timed-out sync decision on a key before its report: if both reached redis, the second counts twice",
			"key", key, "limit", lim.String(), "weight", n)
		return
	}
	c.uncertainSeq, c.uncertainN = seq, n
}
