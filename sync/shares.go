package reconcile

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
)

// Async mode's rounds: the share protocol.
//
// A node decides every key in its share of the key's limit, in memory. A key
// nobody contests is split evenly among the fleet: every node decides it in
// one over the fleet, alone, and it costs Redis nothing. A node that needs
// more of a key (a request denied, or too heavy for its share) claims it:
// the claim reaches every node through the heartbeat, and every node that
// holds the key joins the contest, reporting its state; the others give up
// their even split. Then the key's shares live in Redis (contest.lua):
// grants that follow the nodes' demand, and a pool of the share nobody
// holds; capacity moves with the spent state it carries, so the shares never
// add up to more than the whole limit and moving them never creates room.
// A node reports a contested key when a request was denied there (backing
// off while its reports change nothing), when it joins, when another node
// recalls the key, and to renew a share above an even split before its short
// lease lapses; nothing else needs Redis.

// part is what this node knows of one key it reports on: the ledger's
// running totals, and when the key is contested, its share and schedule.
type part struct {
	kl keyLim

	// The ledger: this node's running total of what it admitted on the key.
	epoch, total, acked int64
	hits                int64     // demand since the last report
	since               time.Time // when hits began to accumulate
	demand              float64   // the demand last reported, smoothed (requests/s)
	demandAt            time.Time // when it was measured; zero before the first report
	last                time.Time // last activity

	contested bool  // the key is claimed: its share is Redis's to grant
	claimer   bool  // this node claimed it and has not reported yet
	join      bool  // the node must report to join (or rejoin) the contest
	recall    bool  // another node recalled the key: report it
	recallAt  int64 // the last recall seen (Redis ns)
	pressure  bool  // a request was denied since the last report
	backoff   uint8 // pressure reports that changed nothing in a row
	next      int   // the round before which pressure alone does not report
	wantBack  bool  // the node's want waits on others: recall them
	recallOut int   // the round before which this node recalls no more

	joined   bool      // Redis holds a record of this node on the key
	applied  int64     // the last answer applied
	grant    int64     // the share decided in, in 1/remote.GrantOne
	leaseEnd int64     // when a grant above an even split lapses (Redis ns)
	span     int64     // how long it was granted for
	target   int64     // what the node's demand earns it
	asked    time.Time // the last report that carried demand
	renewAt  int64     // when to renew the claim next (Redis ns)
	faulted  bool
	retryAt  int
	inflight bool  // a report is on its way: one at a time per key, so an answer is never taken back while it is applied
	resetAt  int64 // when this node reset the key (Redis ns), until the answer that says so
}

// sentShare is what a share report carried, to apply its answer.
type sentShare struct {
	p            *part
	total, hits  int64
	demand       float64 // the demand reported (demandOf)
	grant        int64
	taken        time.Time
	pressure     bool
	join, recall bool
}

// getPart returns the part of kl, making it if there is room; nil if not.
// r.mu is held.
func (r *Reconciler) getPart(kl keyLim, now time.Time) *part {
	if p, ok := r.parts[kl]; ok {
		return p
	}
	if len(r.parts) >= r.cfg.MaxPending {
		return nil
	}
	r.counters.epoch = max(r.counters.epoch+1, now.UnixMicro())
	p := &part{kl: kl, epoch: r.counters.epoch, since: now, last: now}
	r.parts[kl] = p
	return p
}

// addSpend counts spend s into its part, and returns the weight it had to
// drop for want of room. r.mu is held.
func (r *Reconciler) addSpend(s local.Spend, now time.Time) (*part, int64) {
	p := r.getPart(keyLim{s.Key, s.Limit}, now)
	if p == nil {
		return nil, s.Spent
	}
	if p.hits == 0 && s.Since > 0 {
		p.since = time.Unix(0, s.Since)
	}
	p.total += s.Spent
	if !r.cfg.Ledger {
		p.acked = p.total // no ledger: nothing of it waits for Redis
	}
	p.hits += s.Hits
	p.last = now
	return p, 0
}

// demandSpan is the time constant of the demand a node reports, in
// intervals: the requests it was asked for per second, averaged over about
// that many rounds. Measured over one report's interval alone, a key asked
// for 50 times a second reads 0 or 100 from one report to the next; the
// targets would follow the noise, and a node recalled while its reading was
// 0 would shrink below what it is asked for and deny.
const demandSpan = 10

// demandOf is p's demand to report at now: the requests asked for since the
// last report, per second, folded into the demand reported before with a
// weight that grows with the time since (an exponential moving average of
// time constant demandSpan intervals). The answer's apply keeps it
// (sentShare). r.mu is held.
func (r *Reconciler) demandOf(p *part, now time.Time) float64 {
	interval := r.cfg.Interval.Seconds()
	latest := float64(p.hits) / max(now.Sub(p.since).Seconds(), interval)
	if p.demandAt.IsZero() {
		return latest
	}
	w := 1 - math.Exp(-max(now.Sub(p.demandAt).Seconds(), interval)/(demandSpan*interval))
	return p.demand + w*(latest-p.demand)
}

// outgrowing reports whether p's key is asked of this node faster than its
// grant refills, measured over at least outgrowFor rounds: once the share's
// burst runs out the node will deny, and compliant traffic that moved to
// this node from another (or an outage that begins meanwhile) would be
// refused while the shares catch up. Reporting the demand now moves the
// shares before the first denial. r.mu is held.
func (r *Reconciler) outgrowing(p *part) bool {
	if p.hits == 0 || p.grant <= 0 {
		return false
	}
	secs := r.deps.Clock.Now().Sub(p.since).Seconds()
	if secs < outgrowFor*r.cfg.Interval.Seconds() {
		return false
	}
	lim := p.kl.lim
	refill := float64(lim.Rate) / lim.Period.Seconds() * float64(p.grant) / float64(remote.GrantOne)
	return float64(p.hits)/secs > refill
}

// outgrowFor is the fewest rounds over which outgrowing measures demand:
// over one or two, a key asked for a few times a second reads as a burst.
const outgrowFor = 5

// slackOf is how far a share of lim may differ from what it should be
// before it is worth a report: a request's worth, or an eighth of the
// share (contest.lua's own threshold for a recall). Demand above the limit
// on every node moves the targets a little with every report; chasing that
// would report the key every few rounds and admit nothing more.
func slackOf(lim limit.Limit, share int64) int64 {
	one := (remote.GrantOne + lim.Capacity() - 1) / lim.Capacity()
	return max(one, share/8)
}

// even is an even split of the fleet, in 1/remote.GrantOne.
func (r *Reconciler) even() int64 { return int64(local.ShareAmong(r.deps.Engine.Fleet())) }

// claimTTL is how long a claim on lim lives after its last renewal: past
// the long lease, and past the time a wholly spent state takes to refill,
// so that every node goes back to its even split only once nothing it could
// decide on differs from a fresh key's.
func (r *Reconciler) claimTTL(lim limit.Limit) int64 {
	refill := lim.Period
	if lim.Algorithm.IsBucket() {
		refill = lim.Tolerance()
	} else {
		refill *= 2
	}
	return int64(r.deps.Store.Lease() + refill + 4*r.cfg.Interval)
}

// shareRound runs one round of Async mode.
func (r *Reconciler) shareRound(ctx context.Context, flush bool) (RoundInfo, error) {
	if err := r.roundMu.lock(ctx); err != nil {
		return RoundInfo{Err: err}, err // a round in flight outlasted ctx
	}
	defer r.roundMu.unlock()
	if r.deps.Engine.Degraded() {
		r.mu.Lock()
		r.wasDegraded = true
		r.mu.Unlock()
	}
	if b := r.deps.Breaker; !flush && b.State() == breaker.Open && b.ProbeIn(time.Now()) > 0 {
		r.stats.rounds.Add(1)
		r.stats.errors.Add(1)
		return RoundInfo{Err: breaker.ErrOpen}, breaker.ErrOpen
	}
	start, rnow := r.now()
	e := r.deps.Engine
	if flush {
		r.taken = e.TakeSpend(r.taken[:0])
	} else {
		r.taken = e.TakeDue(rnow, r.taken[:0])
	}
	if d := e.Dropped(); d > r.dropped {
		r.lose(int64(d-r.dropped), "too much spend of evicted keys to keep before a round took it")
		r.dropped = d
	}

	r.mu.Lock()
	r.rounds++
	if r.wasDegraded && !e.Degraded() {
		// Back from degraded mode, where every key was decided in one over
		// the fleet: contested keys go back to their shares (an even split at
		// most, for a grant whose lease lapsed meanwhile).
		even := r.even()
		for _, p := range r.contested {
			if p.joined {
				if p.grant > even && p.leaseEnd <= rnow {
					p.grant = even
				}
				e.SetShare(p.kl.key, p.kl.lim, local.Share(max(p.grant, 1)))
				r.setGrant(p.kl, p.grant)
			}
		}
		r.wasDegraded = false
	}
	lost := int64(0)
	for _, s := range r.taken {
		if !r.cfg.Ledger && !s.Pressure && r.parts[keyLim{s.Key, s.Limit}] == nil {
			continue // decided alone, and no ledger to keep: nothing for Redis
		}
		p, dropped := r.addSpend(s, start)
		lost += dropped
		if p == nil || !s.Pressure {
			continue
		}
		if !p.contested {
			r.claim(p, rnow)
		} else {
			p.pressure = true
		}
	}
	r.releaseTaken()
	deferred := r.buildShares(rnow, flush)
	ledger := r.buildLedger(flush)
	hb := r.heartbeat(rnow, flush)
	r.mu.Unlock()
	if lost > 0 {
		r.lose(lost, "too many keys to keep a count of", "max_pending", r.cfg.MaxPending)
	}
	info := RoundInfo{Keys: len(r.shareReports) + len(ledger), Deferred: deferred}
	r.stats.deferred.Add(uint64(deferred))

	// The heartbeat rides with the first batch.
	var err error
	sent := r.shareSent
	for from := 0; ; from += r.cfg.BatchSize {
		to := min(from+r.cfg.BatchSize, len(sent))
		var first *remote.Heartbeat
		if from == 0 {
			first = hb
		}
		if err = r.sendShares(ctx, from, to, first); err != nil {
			r.mu.Lock()
			for _, s := range sent[from:] {
				s.p.join, s.p.recall = s.p.join || s.join, s.p.recall || s.recall
				s.p.pressure = s.p.pressure || s.pressure
				s.p.inflight = false
			}
			r.mu.Unlock()
			break
		}
		if to == len(sent) {
			break
		}
	}
	if err == nil && len(ledger) > 0 {
		err = r.sendLedger(ctx, ledger)
	}
	end := r.deps.Clock.Now()
	info.Duration = end.Sub(start)
	r.stats.lastDuration.Store(int64(info.Duration))
	r.stats.rounds.Add(1)
	if err != nil {
		r.stats.errors.Add(1)
		info.Err = err
		return info, err
	}
	info.Nodes = int(r.stats.nodes.Load())
	now := r.deps.Offset.Map(end)
	r.mu.Lock()
	rounds := r.rounds
	if rounds%sweepEvery == 0 {
		r.forgetParts(end)
	}
	r.mu.Unlock()
	if rounds%sweepEvery == 0 {
		e.Sweep(now, sweepPerShard)
	}
	return info, nil
}

// claim makes p's key contested: this node claims it in its next heartbeat
// and joins with the share it decides in now. r.mu is held.
func (r *Reconciler) claim(p *part, rnow int64) {
	p.claimer = true
	r.contest(p)
	r.setClaim(p.kl, rnow+r.claimTTL(p.kl.lim), 0)
	r.outbox = append(r.outbox, remote.Claim{Key: p.kl.key, Limit: p.kl.lim, Expiry: rnow + r.claimTTL(p.kl.lim)})
	p.renewAt = rnow + r.claimTTL(p.kl.lim)/3
	r.deps.Engine.Contest(rnow, p.kl.key, p.kl.lim, true, r.deps.Engine.DefaultShare(), false)
	r.stats.claims.Add(1)
}

// buildShares chooses the contested keys this round reports and fills
// r.shareReports and r.shareSent: every key to join or recalled, those under
// pressure (unless backing off), and those with a share above an even split
// due for renewal; everything with unreported spend when flushing. A node
// above its target shrinks to it first. r.mu is held.
func (r *Reconciler) buildShares(rnow int64, flush bool) (deferred int) {
	picks := r.sharePicks[:0]
	even := r.even()
	for _, p := range r.contested {
		if p.inflight || (p.faulted && r.rounds < p.retryAt && !flush) {
			continue
		}
		prio := -1
		switch {
		case flush:
			prio = prioSpend
		case p.join || p.recall:
			prio = prioPressure
		case (p.pressure || p.joined && (p.target-p.grant >= slackOf(p.kl.lim, p.grant) && r.active(p) || r.outgrowing(p))) && r.rounds >= p.next:
			prio = prioPressure // denied, wanting more than granted, or about to be: backing off while nothing changes
		case p.grant > even && p.leaseEnd-rnow <= p.span/2:
			prio = prioRenew // renewed if the key is still in use: see below
		}
		if prio >= 0 {
			picks = append(picks, sharePick{p: p, prio: prio})
		}
	}
	sortSharePicks(picks)
	if !flush && len(picks) > r.cfg.MaxReports {
		deferred = len(picks) - r.cfg.MaxReports
		picks = picks[:r.cfg.MaxReports]
	}
	r.sharePicks = picks

	e := r.deps.Engine
	taken := r.deps.Clock.Now()
	r.shareReports, r.shareSent = r.shareReports[:0], r.shareSent[:0]
	for _, pk := range picks {
		p := pk.p
		r.taken = e.TakeKey(rnow, p.kl.key, p.kl.lim, r.taken[:0])
		for _, s := range r.taken {
			r.addSpend(s, taken)
		}
		clear(r.taken)
		if pk.prio == prioRenew && p.hits == 0 && !flush {
			continue // unused: let the lease lapse to an even split
		}
		grant := r.decidedGrant(p)
		if flush {
			grant = 0 // leaving: everything back to the pool
		} else if p.joined && p.recall && p.target < grant {
			grant = p.target // recalled: shrink to the target first, never after
		}
		if grant != r.decidedGrant(p) || flush {
			e.SetShare(p.kl.key, p.kl.lim, local.Share(max(grant, 1)))
			p.grant = grant
			r.setGrant(p.kl, grant)
		}
		est, _ := e.Estimate(p.kl.key, p.kl.lim)
		demand := r.demandOf(p, taken)
		r.shareReports = append(r.shareReports, remote.ShareReport{
			Key: p.kl.key, Limit: p.kl.lim, Grant: grant, State: est, Now: rnow, Applied: p.applied,
			Demand: demand, Epoch: p.epoch, Total: p.total, Acked: p.acked, Claim: p.claimer,
			Pressure: p.pressure && !flush, Leave: flush, // a node leaving wants nothing
		})
		r.shareSent = append(r.shareSent, sentShare{p: p, total: p.total, hits: p.hits, demand: demand, grant: grant, taken: taken,
			pressure: pk.prio == prioPressure && !p.join && !p.recall, join: p.join, recall: p.recall})
		p.join, p.recall, p.pressure, p.claimer = false, false, false, false
		p.inflight = true
	}
	return deferred
}

// active reports whether p's key was asked for since its last report, as
// far as the engine has told. r.mu is held.
func (r *Reconciler) active(p *part) bool {
	if p.hits > 0 || r.deps.Clock.Now().Sub(p.asked) < r.deps.Store.Lease() {
		return true // asked for since, or recently enough to still want its share
	}
	r.taken = r.deps.Engine.TakeKey(0, p.kl.key, p.kl.lim, r.taken[:0])
	now := r.deps.Clock.Now()
	for _, s := range r.taken {
		r.addSpend(s, now)
	}
	clear(r.taken)
	return p.hits > 0
}

// decidedGrant is the share p's key is decided in now: what was granted, or
// an even split for a key this node joins from its private split. r.mu is
// held.
func (r *Reconciler) decidedGrant(p *part) int64 {
	if p.joined {
		return p.grant
	}
	if s, ok := r.deps.Engine.ShareOf(p.kl.key, p.kl.lim); ok {
		if s <= 1 {
			return 0 // a key made contested: no share yet
		}
		return int64(s)
	}
	return 0
}

// sharePick is a part chosen for this round's report.
type sharePick struct {
	p    *part
	prio int
}

func sortSharePicks(p []sharePick) {
	for i := 1; i < len(p); i++ { // insertion sort: usually few, mostly in order
		for j := i; j > 0 && p[j].prio > p[j-1].prio; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}

// sendShares sends r.shareReports[from:to] (with hb, if set) through the
// breaker, and applies the answers.
func (r *Reconciler) sendShares(ctx context.Context, from, to int, hb *remote.Heartbeat) error {
	reports, sent := r.shareReports[from:to], r.shareSent[from:to]
	round := &remote.ShareRound{Fleet: r.deps.Engine.Fleet(), Acked: r.acked.Load(), Heartbeat: hb}
	callSent := r.deps.Clock.Now()
	_, err := breaker.Call(ctx, r.deps.Breaker, r.batchTimeout(ctx), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.deps.Store.Contest(ctx, reports, round)
	})
	if err != nil && !errors.Is(err, breaker.ErrOpen) && !errors.Is(err, breaker.ErrBusy) {
		// The call may still run and read these buffers: they are its now.
		r.shareReports, r.shareSent = nil, nil
	}
	if err != nil {
		return err
	}
	received := r.deps.Clock.Now()
	if hb != nil {
		r.deps.Offset.Observe(callSent, time.Unix(0, hb.Now), received)
	}
	r.stats.keys.Add(uint64(len(reports)))
	r.applyShares(reports, sent, round.Answers, r.deps.Offset.Map(received))
	if hb != nil {
		r.applyHeartbeat(hb, r.deps.Offset.Map(received))
	}
	return nil
}

// applyShares applies the answers of share reports: the grant and what came
// with it, the lease, the target, the ledger, and what the answer says.
func (r *Reconciler) applyShares(reports []remote.ShareReport, sent []sentShare, answers []remote.ShareAnswer, rnow int64) {
	e := r.deps.Engine
	even := r.even()
	lostKeys, firstLost := 0, ""
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, a := range answers {
		s := sent[i]
		p := s.p
		p.inflight = false
		if a.Err != nil && remote.IsUnreportable(a.Err) {
			// Never sendable (a limit Async cannot share): retrying would
			// fail every round. The key goes back to the even split.
			r.stats.faults.Add(1)
			r.named1(p.kl.key, "reconcile: this key's limit cannot be reconciled in async mode: it stays in the even split",
				"key", p.kl.key, "limit", p.kl.lim.String(), "err", a.Err)
			r.uncontest(p.kl, rnow)
			continue
		}
		if a.Err != nil {
			p.join, p.recall = p.join || s.join, p.recall || s.recall
			if remote.IsKeyFault(a.Err) {
				r.stats.faults.Add(1)
				if !p.faulted {
					p.faulted = true
					e.SetFault(p.kl.key, p.kl.lim, true)
					r.named1(p.kl.key, "reconcile: redis refuses this key: deciding it under the fallback until it is fixed",
						"key", p.kl.key, "limit", p.kl.lim.String(), "err", a.Err)
				}
				p.retryAt = r.rounds + faultRetryRounds
			}
			continue
		}
		if p.faulted {
			p.faulted = false
			e.SetFault(p.kl.key, p.kl.lim, false)
			r.log.Info("reconcile: redis accepts the key again", "key", p.kl.key, "limit", p.kl.lim.String())
		}
		if a.Reset {
			r.applyReset(p, rnow)
		}
		if a.Growth > 0 {
			e.Grow(rnow, p.kl.key, p.kl.lim, local.Share(a.Growth), a.Pool)
		}
		if s, ok := e.ShareOf(p.kl.key, p.kl.lim); ok && int64(s) != max(a.Grant, 1) {
			e.SetShare(p.kl.key, p.kl.lim, local.Share(max(a.Grant, 1)))
		}
		old := s.grant
		p.joined, p.applied = true, a.Seq
		p.grant, p.leaseEnd, p.span, p.target = a.Grant, a.LeaseEnd, a.LeaseEnd-a.Now, a.Target
		r.setGrant(p.kl, a.Grant)
		p.acked = max(p.acked, s.total)
		p.hits = max(p.hits-s.hits, 0)
		p.since = s.taken
		p.demand, p.demandAt = s.demand, s.taken
		if s.hits > 0 {
			p.asked = s.taken
		}
		if s.pressure {
			// Back off while reports change nothing: neither the grant nor
			// the target (which moves first, as the demands shift).
			if absDiff(a.Grant, old)*8 <= max(old, 1) {
				p.backoff = min(p.backoff+1, maxBackoff)
			} else {
				p.backoff = 0
			}
			p.next = r.rounds + 1<<p.backoff
		}
		if a.Recall && r.rounds >= p.recallOut {
			p.wantBack = true
		}
		if s.recall && a.Grant-a.Target >= slackOf(p.kl.lim, a.Target) {
			p.recall = true // recalled, and holding more than its target now says: shrink to it, next round
		}
		if a.Lost {
			p.wantBack = true // the others must rejoin too
			r.stats.lostState.Add(1)
			if lostKeys++; lostKeys == 1 {
				firstLost = p.kl.key
			}
		}
		if a.Over {
			r.stats.over.Add(1)
		}
		if rnow >= p.renewAt && (s.hits > 0 || p.grant > even) {
			r.renew(p, rnow, false) // a contested key's claim lives while the key is in use
		}
	}
	if lostKeys > 0 {
		r.log.Warn("reconcile: redis had lost the shares of keys this node had reported (evicted, deleted, or a restart): they were taken again from this node's state",
			"keys", lostKeys, "first", firstLost, "lost_total", r.stats.lostState.Load())
	}
}

// renew queues a renewal of p's claim (a recall too, if asked) for the next
// heartbeat. r.mu is held.
func (r *Reconciler) renew(p *part, rnow int64, recall bool) {
	ttl := r.claimTTL(p.kl.lim)
	r.outbox = append(r.outbox, remote.Claim{Key: p.kl.key, Limit: p.kl.lim, Expiry: rnow + ttl, Recalling: recall})
	r.setClaim(p.kl, rnow+ttl, -1)
	p.renewAt = rnow + ttl/3
}

// buildLedger chooses the ledger entries this round sends: spend of keys
// decided alone that left memory (evicted), every few rounds, and all of it
// when flushing. r.mu is held.
func (r *Reconciler) buildLedger(flush bool) []remote.LedgerEntry {
	if !r.cfg.Ledger || !flush && r.rounds%sweepEvery != 0 {
		return nil
	}
	out := r.ledgerOut[:0]
	r.ledgerParts = r.ledgerParts[:0]
	for _, p := range r.parts {
		if p.contested || p.total <= p.acked {
			continue
		}
		if !flush && len(out) >= r.cfg.BatchSize {
			break
		}
		out = append(out, remote.LedgerEntry{Key: p.kl.key, Limit: p.kl.lim, Epoch: p.epoch, Total: p.total, Acked: p.acked})
		r.ledgerParts = append(r.ledgerParts, ledgerSent{p: p, total: p.total})
	}
	r.ledgerOut = out
	return out
}

// ledgerSent is what a ledger entry carried.
type ledgerSent struct {
	p     *part
	total int64
}

// sendLedger sends ledger entries in batches of at most BatchSize, each its
// own call through the breaker, and acknowledges those applied. It stops at
// the first batch that fails.
func (r *Reconciler) sendLedger(ctx context.Context, entries []remote.LedgerEntry) error {
	sent := r.ledgerParts[:len(entries)]
	errs := make([]error, len(entries))
	for from := 0; from < len(entries); from += r.cfg.BatchSize {
		to := min(from+r.cfg.BatchSize, len(entries))
		batch, batchErrs := entries[from:to], errs[from:to]
		_, err := breaker.Call(ctx, r.deps.Breaker, r.batchTimeout(ctx), func(ctx context.Context) (struct{}, error) {
			return struct{}{}, r.deps.Store.AddToLedgers(ctx, batch, batchErrs)
		})
		if err != nil {
			return err
		}
		r.mu.Lock()
		for i, s := range sent[from:to] {
			if batchErrs[i] == nil {
				s.p.acked = max(s.p.acked, s.total)
			}
		}
		r.mu.Unlock()
	}
	return nil
}

// forgetParts drops parts that no longer matter (uncontested, everything
// acknowledged, idle for half the active window) and counts the keys with
// spend Redis has not acknowledged (Stats.Pending). It visits every part:
// the rounds run it every sweepEvery rounds. r.mu is held.
func (r *Reconciler) forgetParts(now time.Time) {
	idle := r.cfg.ActiveWindow / 2
	pending := 0
	for kl, p := range r.parts {
		if p.total > p.acked {
			pending++
		}
		if p.contested || p.total != p.acked || p.hits != 0 || now.Sub(p.last) <= idle {
			continue
		}
		delete(r.parts, kl)
	}
	r.stats.pending.Store(int64(pending))
}

// contest marks p's key as contested: it must join. r.mu is held.
func (r *Reconciler) contest(p *part) {
	p.contested, p.join = true, true
	r.contested[p.kl] = p
}

// expireShares ends what lapses: a grant above an even split whose lease
// lapses shrinks to an even split (a margin early on this node's clock, so
// it never uses a share Redis may have given away); a claim that expired
// returns its key to the even split.
func (r *Reconciler) expireShares() {
	_, rnow := r.now()
	_, unc, _ := r.deps.Offset.Estimate()
	margin := int64(r.cfg.Interval)*11/10 + int64(unc)
	e := r.deps.Engine
	even := r.even()
	r.mu.Lock()
	defer r.mu.Unlock()
	leases := 0
	for _, p := range r.contested {
		if p.grant > even && p.leaseEnd-margin <= rnow {
			e.SetShare(p.kl.key, p.kl.lim, local.Share(even))
			p.grant = even
			r.setGrant(p.kl, even)
		}
		if p.grant > even {
			leases++
		}
	}
	r.stats.leases.Store(int64(leases))
	for _, kl := range r.expiredClaims(rnow - margin) {
		if p := r.parts[kl]; p != nil && p.grant > even {
			continue // still using more than its split: its claim is being renewed
		}
		r.uncontest(kl, rnow)
	}
}

// uncontest returns kl to the even split on this node: its part (if any)
// leaves the contest, its claim is forgotten, and the engine decides it in
// the fleet's even split again. r.mu is held.
func (r *Reconciler) uncontest(kl keyLim, rnow int64) {
	if p := r.parts[kl]; p != nil {
		p.contested, p.joined, p.grant, p.join, p.recall = false, false, 0, false, false
		delete(r.contested, kl)
	}
	r.dropClaim(kl)
	r.deps.Engine.Contest(rnow, kl.key, kl.lim, false, 0, false)
}

// Contested reports whether this node holds (key, lim) as contested.
func (r *Reconciler) Contested(key string, lim limit.Limit) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.parts[keyLim{key, lim}]
	return p != nil && p.contested
}
