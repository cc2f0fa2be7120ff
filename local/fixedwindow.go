package local

import (
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// The fixed window counts requests in windows aligned to the Unix epoch
// (window index = now / Period), or to the calendar in a zone
// (limit.Limit.WindowAt), so every node and Redis agree on where a window
// starts. Counts are kept scaled: C = share × (the node's estimate of
// the global count), so the whole share counts one request as ShareOne, and a
// request of weight n fits while C + n×ShareOne <= share × Rate.
//
// State words: st[0] is the window index, st[1] the scaled count.
//
// Its known weakness is kept, not hidden: a client can spend Rate at the end
// of one window and Rate again at the start of the next (see the tests).

// windowIndex returns the window now falls in, never earlier than the one the
// state already holds: time that goes backwards does not reopen a window.
func windowIndex(st *[3]int64, now int64, p *policy) int64 {
	return max(p.index(now), st[0])
}

// fixedWindow decides a request of weight n at now into res. The caller has
// rolled the state to now's window.
func fixedWindow(res *limit.Result, st *[3]int64, now int64, p *policy, n int64, s Share) {
	budget := int64(s) * p.lim.Rate
	cost := n * int64(ShareOne)
	// A request heavier than this node's share passes only in an empty window.
	allowed := st[1]+cost <= budget || (cost > budget && st[1] == 0)
	res.Allowed = allowed
	if allowed {
		st[1] += cost
	}
	_, end := p.bounds(st[0])
	if !allowed {
		res.RetryAfter = time.Duration(end - now)
	}
	res.Remaining = max(budget-st[1], 0) / int64(ShareOne)
	if st[1] > 0 {
		res.ResetAfter = time.Duration(end - now)
	}
}

// rollFixed moves the state to window w, emptying the count when it changes.
// It returns the window the count belonged to and whether it changed.
func rollFixed(st *[3]int64, w int64) (old int64, rolled bool) {
	old = st[0]
	if w == old {
		return old, false
	}
	st[0], st[1] = w, 0
	return old, true
}

// seedFixed sets the state of window w from the global count of window g,
// plus this node's pending spend in w, scaled by share s.
func seedFixed(st *[3]int64, w int64, s Share, g limit.State, pending int64) {
	st[0] = w
	st[1] = pending * int64(ShareOne)
	if g.Window == w {
		st[1] += int64(s) * g.Count
	}
}

// fixedFresh reports whether a window state is empty at now.
func fixedFresh(st *[3]int64, now int64, p *policy) bool { return p.index(now) > st[0] || st[1] == 0 }
