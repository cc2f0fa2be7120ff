package reconcile

import (
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Reset spreads a reset of (key, lim) that this node made in Redis at at
// (Redis ns; remote.Store.ResetShares) to the fleet: this node starts the
// key afresh now, keeping its share and its spend not yet reported (the
// ledger still gets it), and claims the key with a recall in its next
// heartbeat, so that every node holding state of the key reports it and is
// told, in the answer, to start it afresh too. Until a node has, it decides
// on its old state: a reset reaches the whole fleet within about two
// intervals, and errs on the strict side meanwhile.
func (r *Reconciler) Reset(key string, lim limit.Limit, at int64) {
	e := r.deps.Engine
	start, rnow := r.now()
	e.Restart(rnow, key, lim)
	if !r.cfg.Shares {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.getPart(keyLim{key, lim}, start)
	if p == nil {
		r.log.Warn("reconcile: too many keys to keep a count of: a reset reaches the other nodes only as the key refills", "key", key, "max_pending", r.cfg.MaxPending)
		return
	}
	p.resetAt = at
	if !p.contested {
		r.claim(p, rnow)
		r.outbox[len(r.outbox)-1].Recalling = true
		return
	}
	r.renew(p, rnow, true)
}

// applyReset starts p's key afresh after Redis said it was reset since the
// node's state began, unless this node made the reset itself and started
// it afresh then. r.mu is held.
func (r *Reconciler) applyReset(p *part, rnow int64) {
	if p.resetAt != 0 && rnow-p.resetAt < int64(2*r.cfg.ActiveWindow+time.Second) {
		p.resetAt = 0 // this node's own reset: it restarted then
		return
	}
	p.resetAt = 0
	r.deps.Engine.Restart(rnow, p.kl.key, p.kl.lim)
	r.stats.resets.Add(1)
}
