package local

import (
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/intmath"
	"github.com/hybridlimit/hybridlimit/limit"
)

// Reservations follow golang.org/x/time/rate. A reservation on the token
// bucket is always made if it can wait long enough: the bucket goes into
// debt, and the request acts when its tokens have refilled. On the leaky
// bucket it takes a place in the queue, Burst requests long, and acts when
// the requests ahead of it have drained.
//
// Both remember, in st[2], when the latest admitted request acts (x/time/
// rate's lastEvent): a cancelled reservation gives back its n intervals
// less the time later reservations already count on, so a request queued
// behind it never shares a slot with one made after the cancel.

// ErrNotBucket is returned by ReserveN and CancelN for a limit whose
// algorithm is not a bucket: the window algorithms cannot reserve.
var ErrNotBucket = errors.New("local: reserve needs the token or leaky bucket")

// ReserveN reserves a request of weight n for key under lim at now (Unix
// ns), if it can act within maxWait: the Reservation's Delay says how long
// it must wait. When it cannot, nothing is spent and RetryAfter says when a
// reservation would fit. On the leaky bucket it must also fit in the queue.
// A negative maxWait is zero.
//
// In Asks mode (not degraded) it goes by the node's share as AllowN does:
// it returns ErrShort, changing nothing, when the node holds none of the key
// (a contested key it holds no grant of, or one it cannot vouch for; a key
// with no even split), when the request can never fit its share, or when
// the reservation would have to wait in a share smaller than the whole
// limit: the fleet may have the room now. ReserveHeld then makes it in the
// share the node holds, after the caller asked the fleet. ErrFaulted is a
// key Redis refuses: decide it under the fallback.
func (e *Engine) ReserveN(now int64, key string, lim limit.Limit, n int64, maxWait time.Duration) (limit.Reservation, error) {
	return e.reserve(now, key, lim, n, maxWait, false)
}

// ReserveHeld is ReserveN in Asks mode for a reservation the fleet was
// asked about: it is made in the share the node holds, waiting as that
// share refills, and ErrShort only when the node holds no share that could
// ever make it. Outside Asks mode it is ReserveN.
func (e *Engine) ReserveHeld(now int64, key string, lim limit.Limit, n int64, maxWait time.Duration) (limit.Reservation, error) {
	return e.reserve(now, key, lim, n, maxWait, true)
}

func (e *Engine) reserve(now int64, key string, lim limit.Limit, n int64, maxWait time.Duration, held bool) (limit.Reservation, error) {
	if !lim.Algorithm.IsBucket() {
		return limit.Reservation{}, fmt.Errorf("%w, not %v", ErrNotBucket, lim.Algorithm)
	}
	if err := limit.CheckKey(key); err != nil {
		return limit.Reservation{}, err
	}
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.sealed {
		return limit.Reservation{}, ErrSealed
	}
	en, err := sh.lookup(key, h, lim, Share(e.newKey.Load()))
	if err == nil {
		err = en.pol.checkN(n)
	}
	if err != nil {
		return limit.Reservation{}, err
	}
	now = sh.clamp(now)
	degraded := e.degraded.Load()
	if degraded {
		en.clear(flagEmpty)
		en.setShare(e.degradedShare())
	} else if !en.has(flagContested) {
		en.setShare(Share(e.newKey.Load())) // the default share follows the fleet's size
	}
	p := en.pol
	asks := e.asks && !degraded && n > 0
	if asks {
		if en.has(flagFault) {
			return limit.Reservation{}, ErrFaulted
		}
		if e.unheld(en, p, now) || heavy(p, n, en.share) {
			return limit.Reservation{}, ErrShort
		}
		if !held && en.share < ShareOne {
			trial := en.st
			if r := bucketReserve(&trial, now, p, n, en.share, int64(max(maxWait, 0))); !r.Allowed || r.Delay > 0 {
				return limit.Reservation{}, ErrShort
			}
		}
	}
	full := en.st[0] <= now
	r := bucketReserve(&en.st, now, p, n, en.share, int64(max(maxWait, 0)))
	if e.asks && p.lim.Algorithm == limit.TokenBucket {
		if r.Allowed && n > 0 {
			shadowAdmit(en, p, n, now, full)
		} else if full {
			en.ex, en.exSince = now, now
		}
	}
	if e.track && n > 0 {
		sh.record(key, en, n, r.Allowed, degraded, now)
		if asks && r.Allowed {
			sh.pressIfLow(key, en, p, r.Remaining)
		}
	}
	return r, nil
}

// bucketReserve reserves on either bucket.
func bucketReserve(st *[3]int64, now int64, p *policy, n int64, s Share, maxWait int64) limit.Reservation {
	if p.lim.Algorithm == limit.TokenBucket {
		return tokenReserve(st, now, p, n, s, maxWait)
	}
	return leakyQueue(st, now, p, n, s, maxWait)
}

// CancelN gives back a reservation of weight n for key under lim that was
// to act at act (Unix ns: its At + Delay) and will not, as x/time/rate's
// Reservation.CancelAt does: nothing once act has passed, else its n
// intervals less the time later reservations already count on. It reports
// whether anything was given back. A key no longer held, or held under
// another limit, gives back nothing. Spend the reconciler has already
// taken stays counted globally.
func (e *Engine) CancelN(now int64, key string, lim limit.Limit, n, act int64) (bool, error) {
	if !lim.Algorithm.IsBucket() {
		return false, fmt.Errorf("%w, not %v", ErrNotBucket, lim.Algorithm)
	}
	if n <= 0 || limit.CheckKey(key) != nil {
		return false, nil
	}
	sh := e.shardOf(e.hash(key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil {
		return false, nil
	}
	t := gcraInterval(&en.st, en.pol, en.share)
	restored := cancelReservation(&en.st, sh.clamp(now), t, n, act)
	if restored > 0 {
		en.spent = uint32(max(int64(en.spent)-restored/t, 0))
	}
	return restored > 0, nil
}

// tokenReserve reserves a request of weight n at now on the token bucket,
// if it can act within maxWait.
func tokenReserve(st *[3]int64, now int64, p *policy, n int64, s Share, maxWait int64) limit.Reservation {
	t := gcraInterval(st, p, s)
	tau := p.tolerance
	tat := max(st[0], now)
	newTAT := tat + intmath.MulSat(n, t)
	wait := max(newTAT-tau-now, 0)
	r := limit.Reservation{Result: limit.Result{Limit: p.lim, Allowed: wait <= maxWait}, At: now}
	if r.Allowed {
		r.Delay = time.Duration(wait)
		st[0], tat = newTAT, newTAT
		st[2] = now + wait
	} else {
		r.RetryAfter = time.Duration(wait - maxWait)
	}
	r.Remaining = remainingTokens(now, tat, tau, p.interval)
	r.ResetAfter = time.Duration(tat - now)
	return r
}

// leakyQueue reserves a place for a request of weight n at now, if the
// queue has room and its turn comes within maxWait.
func leakyQueue(st *[3]int64, now int64, p *policy, n int64, s Share, maxWait int64) limit.Reservation {
	t := gcraInterval(st, p, s)
	tau := p.tolerance
	tat := max(st[0], now)
	wait := tat - now
	cost := intmath.MulSat(n, t)
	// As with the token bucket, a request heavier than the node's share of
	// the queue joins an empty queue rather than never.
	fits := wait+cost <= tau || (cost > tau && wait == 0)
	r := limit.Reservation{Result: limit.Result{Limit: p.lim, Allowed: fits && wait <= maxWait}, At: now}
	switch {
	case r.Allowed:
		r.Delay = time.Duration(wait)
		tat += cost
		st[0] = tat
		st[2] = now + wait
	case !fits && cost > tau:
		r.RetryAfter = time.Duration(max(wait, wait-maxWait))
	case !fits:
		r.RetryAfter = time.Duration(max(wait+cost-tau, wait-maxWait))
	default:
		r.RetryAfter = time.Duration(wait - maxWait)
	}
	r.Remaining = remainingTokens(now, tat, tau, p.interval)
	r.ResetAfter = time.Duration(tat - now)
	return r
}

// cancelReservation gives back a reservation of n intervals of t that was
// to act at act, and returns the ns given back: x/time/rate's CancelAt.
func cancelReservation(st *[3]int64, now, t, n, act int64) int64 {
	if act < now {
		return 0 // it has acted, or could have
	}
	cost := intmath.MulSat(n, t)
	restore := cost - (st[2] - act) // what later reservations do not count on
	if restore <= 0 {
		return 0
	}
	before := max(st[0], now)
	st[0] = max(before-restore, now)
	if st[2] == act {
		if prev := act - cost; prev >= now {
			st[2] = prev
		}
	}
	return before - st[0]
}
