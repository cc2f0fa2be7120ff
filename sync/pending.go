package reconcile

import (
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
)

// spendKey identifies the global state a spend belongs to.
type spendKey struct {
	key    string
	lim    limit.Limit
	window int64 // window algorithms only; zero for buckets
}

// pending is the spend a round has to send: what the engine handed over this
// round plus what failed rounds kept, merged per global state. It is bounded:
// beyond max distinct states the newest spend is dropped and counted, never
// silently.
type pending struct {
	spends map[spendKey]*local.Spend
	order  []spendKey // insertion order, so rounds report deterministically
	max    int
}

func newPending(max int) *pending {
	return &pending{spends: make(map[spendKey]*local.Spend), max: max}
}

// add merges s in, and reports the weight it had to drop for want of room.
func (p *pending) add(s local.Spend) (lost int64) {
	k := spendKey{key: s.Key, lim: s.Limit}
	if !s.Limit.Algorithm.IsBucket() {
		k.window = s.Window
	}
	if cur, ok := p.spends[k]; ok {
		cur.Spent += s.Spent
		cur.Hits += s.Hits
		cur.Window = max(cur.Window, s.Window)
		return 0
	}
	if len(p.spends) >= p.max {
		return s.Spent
	}
	c := s
	p.spends[k] = &c
	p.order = append(p.order, k)
	return 0
}

// len is the number of distinct global states pending.
func (p *pending) len() int { return len(p.spends) }

// each calls f for every pending spend, in the order they were added.
func (p *pending) each(f func(*local.Spend)) {
	for _, k := range p.order {
		f(p.spends[k])
	}
}

// reset empties p, keeping its memory for the next round.
func (p *pending) reset() {
	clear(p.spends)
	clear(p.order)
	p.order = p.order[:0]
}
