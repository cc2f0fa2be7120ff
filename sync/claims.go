package reconcile

import (
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
)

// The claims this node knows of: which keys are contested, fleet-wide. The
// engine asks (isClaimed) whenever it makes the state of a key it does not
// hold, so the set has its own lock, taken last: nothing is called while it
// is held.

// claimPage is the most changed claims one heartbeat brings.
const claimPage = 1000

// known is what this node knows of one claim.
type known struct {
	expiry int64 // Redis ns
	recall int64 // the last recall, Redis ns
	grant  int64 // this node's share of the key, as Redis last granted it
}

// isClaimed reports whether (key, lim) is contested, and the share this node
// holds of it (zero: none): the engine's test when it makes the key's state
// again (first seen, or evicted and back), so the state starts in the share
// Redis accounts this node for.
func (r *Reconciler) isClaimed(key string, lim limit.Limit) (local.Share, bool) {
	r.cmu.RLock()
	k, ok := r.claims[keyLim{key, lim}]
	r.cmu.RUnlock()
	return local.Share(min(k.grant, int64(local.ShareOne))), ok
}

// setGrant records this node's share of a contested key for the engine.
func (r *Reconciler) setGrant(kl keyLim, g int64) {
	r.cmu.Lock()
	if k, ok := r.claims[kl]; ok {
		k.grant = g
		r.claims[kl] = k
	}
	r.cmu.Unlock()
}

// setClaim records a claim's expiry and, when recall is positive, its last
// recall (negative: keep the one known).
func (r *Reconciler) setClaim(kl keyLim, expiry, recall int64) {
	r.cmu.Lock()
	k := r.claims[kl]
	k.expiry = max(k.expiry, expiry)
	if recall >= 0 {
		k.recall = max(k.recall, recall)
	}
	r.claims[kl] = k
	r.cmu.Unlock()
}

// dropClaim forgets a claim.
func (r *Reconciler) dropClaim(kl keyLim) {
	r.cmu.Lock()
	delete(r.claims, kl)
	r.cmu.Unlock()
}

// expiredClaims returns the claims that expired before t.
func (r *Reconciler) expiredClaims(t int64) []keyLim {
	r.cmu.RLock()
	defer r.cmu.RUnlock()
	var out []keyLim
	for kl, k := range r.claims {
		if k.expiry <= t {
			out = append(out, kl)
		}
	}
	return out
}

// heartbeat builds this round's heartbeat: the claims this node makes,
// renews or recalls, and how far it has processed the claims it learned.
// r.mu is held.
func (r *Reconciler) heartbeat(rnow int64, flush bool) *remote.Heartbeat {
	for _, p := range r.contested {
		if p.wantBack {
			r.renew(p, rnow, true)
			p.wantBack = false
			p.recallOut = r.rounds + 5
		}
	}
	pending := false
	for _, p := range r.contested {
		if !p.joined || p.recall {
			pending = true // a key to join, or to report when recalled: the claims are not processed yet
			break
		}
	}
	if !pending {
		r.mark = r.seen
	}
	hb := &remote.Heartbeat{Mark: r.mark, From: r.from, Limit: claimPage, Claims: r.outbox}
	if flush {
		hb.Limit = 0
	}
	r.outbox = nil
	return hb
}

// applyHeartbeat takes in what the fleet answered: its size, how far it has
// acked the claims, and the claims that changed: a key this node holds
// joins its contest (or reports, when recalled); a key it does not hold is
// remembered as contested, so that it starts in no share if it comes.
func (r *Reconciler) applyHeartbeat(hb *remote.Heartbeat, rnow int64) {
	e := r.deps.Engine
	e.SetFleet(r.cfg.FleetSize, hb.Nodes)
	r.stats.nodes.Store(int64(hb.Nodes))
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev := r.acked.Swap(hb.Acked); hb.Acked > prev {
		// More of the fleet has given way: a node that wants more asks now.
		for _, p := range r.contested {
			if p.joined && p.target > p.grant {
				p.next = 0
			}
		}
	}
	r.from = max(r.from, hb.Next)
	if len(hb.Changed) < claimPage {
		r.seen = max(r.seen, hb.Now) // every claim changed before the heartbeat has been seen
	} else {
		r.seen = max(r.seen, hb.Next)
	}
	now := r.deps.Clock.Now()
	for _, c := range hb.Changed {
		kl := keyLim{c.Key, c.Limit}
		if c.Expiry <= rnow {
			continue
		}
		r.setClaim(kl, c.Expiry, c.Recall)
		held := e.Contest(rnow, c.Key, c.Limit, true, e.DefaultShare(), true)
		p := r.parts[kl]
		if !held && p == nil {
			continue
		}
		if p == nil {
			if p = r.getPart(kl, now); p == nil {
				r.lose(0, "too many keys to keep a count of")
				continue
			}
		}
		if !p.contested {
			r.contest(p)
		}
		if c.Recall > p.recallAt {
			p.recallAt = c.Recall
			if held && p.joined {
				p.recall = true
			}
		}
	}
}
