package reconcile

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
)

// Escalation is the outcome of a request decided with Redis because this
// node's share of the key could never admit it.
type Escalation struct {
	// Admitted reports that the fleet gave the node room and the request
	// was admitted (and counted, in memory and in the ledger).
	Admitted bool
}

// Allowed reports whether the request was admitted.
func (e Escalation) Allowed() bool { return e.Admitted }

// Escalate asks Redis to decide a request of weight n for (key, lim) that
// this node's share could never admit (local.ErrEscalate): a key it decides
// alone is claimed, and the node asks for as much of the pool as the request
// needs. When the pool cannot give it yet (the others have not processed the
// claim, or hold shares a recall will make them give up), the answer says
// so and the caller may try again after an interval (Interval), for at most
// EscalationWait. The call goes through the breaker with timeout (zero: the
// breaker's); an error means Redis did not decide (the caller decides under
// its fallback).
func (r *Reconciler) Escalate(ctx context.Context, key string, lim limit.Limit, n int64, timeout time.Duration) (Escalation, error) {
	r.stats.escalations.Add(1)
	return r.escalateOnce(ctx, key, lim, n, timeout)
}

// EscalationWait is how long a request too heavy for the node's share may
// wait for the fleet to make room.
func (r *Reconciler) EscalationWait() time.Duration { return r.cfg.EscalationWait }

func (r *Reconciler) escalateOnce(ctx context.Context, key string, lim limit.Limit, n int64, timeout time.Duration) (Escalation, error) {
	start, rnow := r.now()
	e := r.deps.Engine
	kl := keyLim{key, lim}
	r.mu.Lock()
	p := r.getPart(kl, start)
	if p == nil {
		r.mu.Unlock()
		return Escalation{}, errNoRoom
	}
	if p.inflight {
		r.mu.Unlock()
		return Escalation{}, nil // a round's report on the key is on its way: ask again after it
	}
	var taken []local.Spend
	for _, s := range e.TakeKey(rnow, key, lim, taken) {
		r.addSpend(s, start)
	}
	if !p.contested {
		r.claim(p, rnow)
	}
	grant := r.decidedGrant(p)
	est, _ := e.Estimate(key, lim)
	demand := r.demandOf(p, start)
	rep := remote.ShareReport{Key: key, Limit: lim, Grant: grant, State: est, Now: rnow, Applied: p.applied,
		Demand: demand, Epoch: p.epoch, Total: p.total, Acked: p.acked, Heavy: n, Claim: p.claimer,
		Pressure: true}
	sent := sentShare{p: p, total: p.total, hits: p.hits, demand: demand, grant: grant, taken: start, join: p.join, recall: p.recall}
	p.join, p.recall, p.claimer = false, false, false
	p.inflight = true
	if p.wantBack {
		r.renew(p, rnow, true)
		p.wantBack = false
	}
	claims := r.outbox
	r.outbox = nil
	r.mu.Unlock()

	hb := &remote.Heartbeat{Mark: r.markNow(), From: 0, Limit: 0, Claims: claims}
	round := &remote.ShareRound{Fleet: e.Fleet(), Acked: r.acked.Load(), Heartbeat: hb}
	_, err := breaker.Call(ctx, r.deps.Breaker, timeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.deps.Store.Contest(ctx, []remote.ShareReport{rep}, round)
	})
	if err == nil && round.Answers[0].Err != nil {
		err = round.Answers[0].Err
	}
	if err != nil {
		r.mu.Lock()
		r.outbox = append(r.outbox, claims...) // they may not have reached Redis: again next round
		p.join, p.recall = p.join || sent.join, p.recall || sent.recall
		// The call may have run in Redis and admitted the request in an
		// answer this node never got: the next round reports the key, and
		// Redis, seeing the answer unapplied, takes it out of the ledger
		// (the pool keeps it spent) and takes back any growth it carried.
		p.pressure = true
		p.inflight = false
		r.mu.Unlock()
		return Escalation{}, err
	}
	r.acked.Store(max(r.acked.Load(), hb.Acked))
	_, now := r.now()
	a := round.Answers[0]
	r.applyShares([]remote.ShareReport{rep}, []sentShare{sent}, round.Answers, now)
	if a.Admitted {
		if !a.FromPool {
			e.Charge(now, key, lim, n) // the node grew to hold it: its state counts it
		}
		r.mu.Lock()
		p.total += n // Redis counted it in this node's ledger total
		p.acked = max(p.acked, sent.total+n)
		r.mu.Unlock()
	} else if a.Recall {
		r.mu.Lock()
		p.wantBack = true
		r.mu.Unlock()
	}
	return Escalation{Admitted: a.Admitted}, nil
}

// markNow is the processed mark the next heartbeat would send.
func (r *Reconciler) markNow() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mark
}

// errNoRoom: the counters are full, so the request cannot be counted.
var errNoRoom = breaker.ErrBusy

// NextSeq returns a sequence number for a sync decision of this node: they
// grow, across restarts too.
func (r *Reconciler) NextSeq() int64 { return r.seq.Add(1) }

// Uncertain notes that the sync decision seq, of weight n on (key, lim),
// timed out, so whether Redis applied it is unknown, and that the node
// decided it again in memory and counted it there: the report that carries
// that spend names seq, and Redis does not apply it twice. Only the first
// such decision per key before a report is named; a second one that also
// reached Redis is counted twice (conservative), and the log says so.
func (r *Reconciler) Uncertain(key string, lim limit.Limit, seq, n int64) {
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
