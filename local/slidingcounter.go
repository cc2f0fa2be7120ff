package local

import (
	"time"

	"github.com/hybridlimit/hybridlimit/intmath"
	"github.com/hybridlimit/hybridlimit/limit"
)

// The sliding window counter approximates a window that slides with now by
// weighting the previous fixed window's count by how much of it the sliding
// window still covers (Cloudflare's approximation):
//
//	weighted = prev × (Period - elapsed) / Period + curr
//
// Counts are scaled by the share as in the fixed window. The weighted count is
// computed exactly in 128-bit integers and rounded up, so the approximation is
// the only error, never arithmetic.
//
// State words: st[0] is the window index, st[1] the previous window's scaled
// count, st[2] the current one's.

// rollSliding moves the state to window w: the current count becomes the
// previous one when w is the next window, both empty when w is later still.
// It returns the window the current count belonged to and whether it changed.
func rollSliding(st *[3]int64, w int64) (old int64, rolled bool) {
	old = st[0]
	switch {
	case w == old:
		return old, false
	case w == old+1:
		st[1], st[2] = st[2], 0
	default:
		st[1], st[2] = 0, 0
	}
	st[0] = w
	return old, true
}

// slidingCounter decides a request of weight n at now into res. The caller
// has rolled the state to now's window.
//
// A calendar window's length varies (a month of 28 to 31 days, a day of 23
// to 25 hours): the previous window is weighed by how much of the current
// window's length, reaching back from now, still overlaps it.
func slidingCounter(res *limit.Result, st *[3]int64, now int64, p *policy, n int64, s Share) {
	start, end := p.bounds(st[0])
	period := end - start
	elapsed := min(max(now-start, 0), period-1)
	budget := int64(s) * p.lim.Rate
	cost := n * int64(ShareOne)
	w := intmath.Weighted(st[1], st[2], elapsed, period)
	allowed := w+cost <= budget || (cost > budget && w == 0)
	res.Allowed = allowed
	if allowed {
		st[2] += cost
		w += cost
	} else {
		res.RetryAfter = time.Duration(intmath.SlidingRetry(st[1], st[2], elapsed, period, max(budget-cost, 0)))
	}
	res.Remaining = max(budget-w, 0) / int64(ShareOne)
	switch {
	case st[2] > 0 && p.calendar(): // the current count weighs until the next window ends
		_, nextEnd := p.bounds(st[0] + 1)
		res.ResetAfter = time.Duration(nextEnd - start - elapsed)
	case st[2] > 0:
		res.ResetAfter = time.Duration(2*period - elapsed)
	case st[1] > 0:
		res.ResetAfter = time.Duration(period - elapsed)
	}
}

// seedSliding sets the state of window w from the global counts of window g,
// plus this node's pending spend in w, scaled by share s.
func seedSliding(st *[3]int64, w int64, s Share, g limit.State, pending int64) {
	st[0], st[1], st[2] = w, 0, pending*int64(ShareOne)
	switch g.Window {
	case w:
		st[1] = int64(s) * g.Prev
		st[2] += int64(s) * g.Count
	case w - 1:
		st[1] = int64(s) * g.Count
	}
}

// slidingFresh reports whether a sliding counter is empty at now.
func slidingFresh(st *[3]int64, now int64, p *policy) bool {
	w := p.index(now)
	return w > st[0]+1 || (w == st[0]+1 && st[2] == 0) || (st[1] == 0 && st[2] == 0)
}
