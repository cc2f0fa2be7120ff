package local

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/ratemath"
	"github.com/hybridlimit/hybridlimit/limit"
)

// The leaky bucket shares the token bucket's state (a TAT and the cached
// share-scaled interval) but drains one request per interval with no burst:
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

// leakyMeter decides a request of weight n at now into res.
func leakyMeter(res *limit.Result, st *[3]int64, now int64, p *policy, n int64, s Share) {
	t := gcraInterval(st, p, s)
	tat := max(st[0], now)
	res.Allowed = tat == now
	if res.Allowed {
		tat += ratemath.MulSat(n, t)
		if n > 0 {
			st[0] = tat
		}
	} else {
		res.RetryAfter = time.Duration(tat - now)
	}
	if tat == now {
		res.Remaining = 1
	}
	res.ResetAfter = time.Duration(tat - now)
}

// leakyQueue reserves a place for a request of weight n at now.
func leakyQueue(st *[3]int64, now int64, p *policy, n int64, s Share) limit.Reservation {
	t := gcraInterval(st, p, s)
	tau := p.tolerance
	tat := max(st[0], now)
	wait := tat - now
	cost := ratemath.MulSat(n, t)
	// As with the token bucket, a request heavier than the node's share of
	// the queue joins an empty queue rather than never.
	allowed := wait+cost <= tau || (cost > tau && wait == 0)
	r := limit.Reservation{Result: limit.Result{Limit: p.lim, Allowed: allowed}}
	if allowed {
		r.Delay = time.Duration(wait)
		tat += cost
		st[0] = tat
	} else if cost > tau {
		r.RetryAfter = time.Duration(wait)
	} else {
		r.RetryAfter = time.Duration(wait + cost - tau)
	}
	r.Remaining = remainingTokens(now, tat, tau, t)
	r.ResetAfter = time.Duration(tat - now)
	return r
}

// cancelReservation gives back a reservation's n intervals, as far as they
// are still ahead of now: the queue behind it moves up.
func cancelReservation(st *[3]int64, now int64, p *policy, n int64, s Share) {
	t := gcraInterval(st, p, s)
	st[0] = max(st[0]-ratemath.MulSat(n, t), now)
}
