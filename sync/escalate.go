package reconcile

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
)

// Escalation is the outcome of a request decided in Redis because this
// node's share of the key could never admit it.
type Escalation struct {
	// Admitted reports that Redis admitted the request and counted it.
	Admitted bool
	// State is the key's global state after the decision, and Now Redis's
	// time then (Unix ns).
	State limit.State
	Now   int64
}

// Escalate decides a request of weight n for (key, lim) in Redis, on the
// fleet's state: for a request heavier than this node's share can ever
// admit. It reports the node's spend on the key with it, in one script, so
// the decision sees the node's own spend; the key is then seeded with the
// state and the share that came back. The call goes through the breaker with
// timeout (zero: the breaker's), bounded by ctx; an error means Redis did
// not decide (the caller decides under its fallback). rnow is the caller's
// time on Redis's clock.
func (r *Reconciler) Escalate(ctx context.Context, key string, lim limit.Limit, n int64, timeout time.Duration) (Escalation, error) {
	start, rnow := r.now()
	r.mu.Lock()
	var taken []local.Spend
	taken = r.deps.Engine.TakeKey(rnow, key, lim, taken)
	for _, s := range taken {
		r.counters.add(s, start)
	}
	c := r.counters.get(keyOf(key, lim, windowOf(lim, rnow)), start)
	if c == nil {
		r.mu.Unlock()
		r.lose(n, "too many keys to keep a count of", "max_pending", r.cfg.MaxPending)
		return Escalation{}, errNoRoom
	}
	est, _ := r.deps.Engine.Estimate(key, lim)
	seconds := max(start.Sub(c.since).Seconds(), r.cfg.Interval.Seconds())
	rep := remote.Report{Key: key, Limit: lim, Window: c.window, Epoch: c.epoch,
		Total: c.total, Refilled: c.refilled, Acked: c.acked, AckedRefilled: c.ackedRefilled,
		Demand: float64(c.hits+n) / seconds, Estimate: est, Now: rnow, Heavy: n,
		UncertainSeq: c.uncertainSeq, UncertainN: c.uncertainN}
	sent := sentReport{c: c, total: c.total, refilled: c.refilled, hits: c.hits, taken: start, grant: -1}
	r.mu.Unlock()
	r.stats.escalations.Add(1)

	round := &remote.Round{Fleet: r.deps.Engine.Fleet(), NoHeartbeat: true}
	_, err := breaker.Call(ctx, r.deps.Breaker, timeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.deps.Store.Reconcile(ctx, []remote.Report{rep}, round)
	})
	if err == nil && len(round.Answers) == 1 && round.Answers[0].Err != nil {
		err = round.Answers[0].Err
	}
	if err != nil {
		return Escalation{}, err
	}
	a := round.Answers[0]
	if a.Admitted {
		// Redis counted the request in this node's total: so must the node.
		r.mu.Lock()
		c.total += n
		sent.total += n
		c.acked = max(c.acked, sent.total)
		r.mu.Unlock()
	}
	_, now := r.now()
	r.apply([]remote.Report{rep}, []sentReport{sent}, round.Answers, now)
	return Escalation{Admitted: a.Admitted, State: a.State, Now: a.Now}, nil
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
