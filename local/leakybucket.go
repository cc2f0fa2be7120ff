package local

import (
	"time"

	"github.com/hybridlimit/hybridlimit/intmath"
	"github.com/hybridlimit/hybridlimit/limit"
)

// The leaky bucket shares the token bucket's state (a TAT, the cached
// share-scaled interval, and when the latest admitted request acts) but drains one request per interval with no burst:
//
//   - as a meter (Allow), a request passes only when everything before it has
//     drained (TAT <= now), and then occupies n intervals: GCRA with burst 1;
//   - as a queue (Reserve), a request joins when the queue, Burst requests
//     long, has room for it, and waits until its turn: the delay is how long
//     the requests ahead of it still take to drain.
//
// The queue's admission test is the token bucket's (the wait plus the
// request's own n intervals fit within Burst×T); what differs is that the
// token bucket lets the request go at once and the queue makes it wait.
// leakyQueue and the cancellation rule are in reserve.go.

// leakyMeter decides a request of weight n at now into res.
func leakyMeter(res *limit.Result, st *[3]int64, now int64, p *policy, n int64, s Share) {
	t := gcraInterval(st, p, s)
	tat := max(st[0], now)
	res.Allowed = tat == now
	if res.Allowed {
		tat += intmath.MulSat(n, t)
		if n > 0 {
			st[0] = tat
			st[2] = now // the latest request to act (see reserve.go)
		}
	} else {
		res.RetryAfter = time.Duration(tat - now)
	}
	if tat == now {
		res.Remaining = 1
	}
	res.ResetAfter = time.Duration(tat - now)
}
