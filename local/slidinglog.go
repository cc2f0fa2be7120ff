package local

import (
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// The sliding window log keeps the time of every admitted request; a request
// of weight n is admitted when the requests of the last Period, plus n, stay
// within Rate. A request admitted at t counts in (t, t+Period]: at exactly
// t+Period it has left the window. Exact, with memory proportional to the
// rate, which Limit.Validate bounds by limit.MaxLogRate.
//
// State words: st[0] is the latest time logged, so a clock that steps back
// never logs out of order; st[1] is the log's slot in its shard's table of
// logs, plus one (0: none yet).

// logEvent is one admitted request of weight n at time at.
type logEvent struct{ at, n int64 }

// eventLog is a queue of admitted requests, oldest first.
type eventLog struct {
	events []logEvent
	head   int   // events[head:] are live
	total  int64 // sum of the live events' n
}

// expire drops the events that have left the window ending at now.
func (l *eventLog) expire(now, period int64) {
	for l.head < len(l.events) && l.events[l.head].at+period <= now {
		l.total -= l.events[l.head].n
		l.head++
	}
	// Reclaim the dead prefix once it is the larger half.
	if l.head > 32 && l.head*2 >= len(l.events) {
		l.events = append(l.events[:0], l.events[l.head:]...)
		l.head = 0
	}
}

func (l *eventLog) live() []logEvent { return l.events[l.head:] }

// slidingLog decides a request of weight n at now into res.
func slidingLog(res *limit.Result, st *[3]int64, l *eventLog, now int64, p *policy, n int64, s Share) {
	now = max(now, st[0])
	period := p.period
	l.expire(now, period)
	budget := int64(s) * p.lim.Rate
	cost := n * int64(ShareOne)
	used := l.total * int64(ShareOne)
	allowed := used+cost <= budget || (cost > budget && l.total == 0)
	res.Allowed = allowed
	if allowed && n > 0 {
		l.events = append(l.events, logEvent{at: now, n: n})
		l.total += n
		used += cost
		st[0] = now
	}
	if !allowed {
		res.RetryAfter = time.Duration(logRetry(l.live(), now, period, l.total, (budget-min(cost, budget))/int64(ShareOne)))
	}
	res.Remaining = max(budget-used, 0) / int64(ShareOne)
	if live := l.live(); len(live) > 0 {
		res.ResetAfter = time.Duration(live[len(live)-1].at + period - now)
	}
}

// logRetry returns how long until enough of the oldest events expire that at
// most room remain.
func logRetry(live []logEvent, now, period, total, room int64) int64 {
	for _, e := range live {
		if total <= room {
			break
		}
		total -= e.n
		if total <= room {
			return e.at + period - now
		}
	}
	return 0
}

// logFresh reports whether the log is empty at now.
func logFresh(l *eventLog, now, period int64) bool {
	live := l.live()
	return len(live) == 0 || live[len(live)-1].at+period <= now
}
