package reports

import (
	"sync"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/remote"
)

// maxUncertainPerReport bounds the timed-out decisions one report names, so
// one key's report stays a bounded script argument; the rest wait for the
// next round, their weight held back from the report's total meanwhile.
const maxUncertainPerReport = 512

// seqs hands out the sequence numbers of a node's sync decisions and keeps
// its low mark: the number at or below which every decision is settled (its
// answer came, or it timed out and the report naming it was acknowledged).
// Redis keeps the node's admitted decisions above the low mark, so a report
// finds every timed-out decision it names however many the node made since.
type seqs struct {
	mu     sync.Mutex
	next   int64  // the next number handed out
	base   int64  // the number of open[0]
	open   []bool // open[i]: decision base+i is not settled
	forced uint64 // decisions settled unanswered at maxOpenSeqs
}

// maxOpenSeqs bounds how far the low mark trails the newest decision: Redis
// keeps every admitted decision of the node above it, on each key, so one
// timed-out decision whose report never comes (Redis refusing its report
// for good) must not hold it back forever. A decision that trails by more
// is settled as it stands: if its report comes later and it did reach
// Redis, it counts twice (counted in Stats.UncertainForced, logged once).
const maxOpenSeqs = 1 << 16

func (s *seqs) begin() (seq, low int64, forced bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq = s.next
	s.next++
	if len(s.open) == 0 {
		s.base, s.open = seq, s.open[:0]
	}
	s.open = append(s.open, true)
	if len(s.open) > maxOpenSeqs {
		forced = s.open[0]
		if forced {
			s.forced++
		}
		s.open[0] = false
		s.advance()
	}
	return seq, s.base - 1, forced
}

// advance moves base past the settled decisions at the front. s.mu is held.
func (s *seqs) advance() {
	k := 0
	for k < len(s.open) && !s.open[k] {
		k++
	}
	s.open, s.base = s.open[k:], s.base+int64(k)
}

func (s *seqs) settle(seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := seq - s.base
	if i < 0 || i >= int64(len(s.open)) {
		return
	}
	s.open[i] = false
	s.advance()
}

func (s *seqs) forcedCount() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forced
}

func (s *seqs) low() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.open) == 0 {
		return s.next - 1
	}
	return s.base - 1
}

// Begin returns a sequence number for a sync decision of this node (they
// grow, across restarts too) and the node's low mark, for remote.Known.
// Every number Begin returns must be settled: by Settle once the call's
// answer came (or it failed without reaching Redis), or by Uncertain.
func (r *Reporter) Begin() (seq, low int64) {
	seq, low, forced := r.seqs.begin()
	if forced && r.forcedLogged.CompareAndSwap(false, true) {
		r.log.Warn("reports: a timed-out sync decision still had no acknowledged report after 65,536 later decisions: it is no longer held apart, and counts twice if it did reach redis (counted in Stats().Reconcile.UncertainForced; logged once)",
			"seq", low)
	}
	return seq, low
}

// Settle notes that the sync decision seq is settled: its answer came, or
// it cannot have reached Redis, or its spend was not counted in memory.
func (r *Reporter) Settle(seq int64) { r.seqs.settle(seq) }

// Uncertain notes that the sync decision seq, of weight n on (key, lim),
// timed out, so whether Redis applied it is unknown, and that the node
// decided it again in memory and counted it there: the report that carries
// that spend names seq, and Redis does not apply it twice. Every such
// decision is named, however many time out on a key before a report; seq
// is settled once a report naming it is acknowledged.
func (r *Reporter) Uncertain(key string, lim limit.Limit, seq, n int64) {
	start, rnow := r.now()
	r.mu.Lock()
	c := r.counters.get(keyOf(key, lim, r.windowOf(lim, rnow)), start)
	if c != nil {
		c.uncertain = append(c.uncertain, remote.Uncertain{Seq: seq, N: n})
		r.counters.bytes += uncertainBytes
		r.unsure = append(r.unsure, c.spendKey)
	}
	r.mu.Unlock()
	if c == nil {
		r.seqs.settle(seq) // no counter: its spend is lost (and counted) when taken
	}
}

// carry returns the timed-out decisions c's report names (a copy: the
// report may outlive the round, on a call the breaker abandoned) and the
// weight of those it leaves for a later report. r.mu is held.
func carry(c *counter) (named []remote.Uncertain, held int64) {
	if len(c.uncertain) == 0 {
		return nil, 0
	}
	k := min(len(c.uncertain), maxUncertainPerReport)
	return append([]remote.Uncertain(nil), c.uncertain[:k]...), heldWeight(c)
}

// heldWeight is the weight of the timed-out decisions c's next report
// leaves for a later one (see carry): not in that report's total. r.mu is
// held.
func heldWeight(c *counter) (held int64) {
	for _, u := range c.uncertain[min(len(c.uncertain), maxUncertainPerReport):] {
		held += u.N
	}
	return held
}

// dropNamed settles the timed-out decisions of a report Redis refused for
// its key (a value of another type): their calls failed on that key too,
// or ran before it changed; they are reported, in full, when the key is
// fixed. Holding them would hold the node's low mark. r.mu is held.
func (r *Reporter) dropNamed(c *counter, named []remote.Uncertain) {
	r.settleNamed(c, named)
}

// settleNamed drops from c the timed-out decisions an acknowledged report
// named (the oldest, in order) and settles them. r.mu is held.
func (r *Reporter) settleNamed(c *counter, named []remote.Uncertain) {
	k := 0
	for k < len(named) && k < len(c.uncertain) && c.uncertain[k].Seq == named[k].Seq {
		r.seqs.settle(named[k].Seq)
		k++
	}
	r.counters.bytes -= int64(k) * uncertainBytes
	if k == len(c.uncertain) {
		c.uncertain = nil
		return
	}
	c.uncertain = append([]remote.Uncertain(nil), c.uncertain[k:]...)
}

// takeUnsure takes from the engine the spend of the keys with timed-out
// decisions noted since the last round, so that each report naming such a
// decision carries its weight in its total: Redis subtracts a named
// decision's weight from what the report brings, once. The spend was
// recorded in the engine before Uncertain named it. r.mu is held.
func (r *Reporter) takeUnsure(rnow int64, now time.Time) {
	for _, k := range r.unsure {
		r.taken = r.deps.Engine.TakeKey(rnow, k.key, k.lim, r.taken[:0])
		for _, s := range r.taken {
			if lost := r.counters.add(s, now); lost > 0 {
				r.lostUnsure += lost
			}
		}
		clear(r.taken)
	}
	clear(r.unsure)
	r.unsure = r.unsure[:0]
	if cap(r.unsure) > takenKeep {
		r.unsure = nil
	}
}
