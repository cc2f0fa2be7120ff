package reports

import (
	"context"
	"errors"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/sync/round"
)

// Sync's rounds: the spend a node made while degraded (and keeps in
// memory) reported to Redis's exact state, counted at the time it was made.
// Which keys a round reports, in what order, and what it does with the
// answers.

// Priorities of a report, the most pressing highest.
const (
	prioOrphan   = iota // spend of an evicted key or a window left behind
	prioSpend           // unreported spend past half the node's share
	prioRenew           // a granted share in use, due for renewal
	prioPressure        // a request denied or too heavy for the share
)

// pick is a counter chosen for this round's report.
type pick struct {
	c    *counter
	prio int
}

// lease is a share of a key Redis granted this node, until end (Unix ns, on
// Redis's clock); span is how long it was granted for.
type lease struct {
	grant, end, span int64
	idle             bool // found unused past half its span: left to lapse, not looked at again
}

// build chooses the counters this round reports and fills r.reports and
// r.sent: every counter with unreported spend when flushing; else those
// under pressure (unless backing off), with a lease to renew, with spend
// past its threshold, or with spend of evicted keys, most pressing first, at
// most MaxReports. It returns how many due counters wait for a later round.
// r.mu is held.
func (r *Reporter) build(rnow int64, flush bool) (deferred int) {
	picks := r.picks[:0]
	for _, c := range r.counters.m {
		unsent := c.total - c.acked
		if c.faulted && r.n < c.retryAt && !flush {
			continue
		}
		prio := -1
		switch {
		case flush:
			if unsent > 0 {
				prio = prioSpend
			}
		case c.pressure && r.n >= c.nextPressure:
			prio = prioPressure
		case c.renew:
			prio = prioRenew
		case c.due || len(c.uncertain) > 0:
			prio = prioSpend
		case c.orphan && unsent > 0:
			prio = prioOrphan
		}
		if prio >= 0 {
			picks = append(picks, pick{c: c, prio: prio})
		}
	}
	if flush {
		sortPicks(picks)
	} else {
		deferred = max(len(picks)-r.cfg.MaxReports, 0)
		picks = topPicks(picks, r.cfg.MaxReports)
	}
	clear(picks[len(picks):cap(picks)]) // the counters of picks left out, for the GC
	r.picks = picks

	taken := r.deps.Clock.Now()
	low := r.seqs.low()
	r.reports, r.sent = r.reports[:0], r.sent[:0]
	for _, p := range picks {
		c := p.c
		named, held := carry(c)
		total := c.total - held // the weight of a timed-out decision goes with its name
		seconds := max(taken.Sub(c.since).Seconds(), r.cfg.Interval.Seconds())
		est, _ := r.deps.Engine.Estimate(c.key, c.lim, total-c.acked, c.window) // without what this report adds
		r.reports = append(r.reports, remote.Report{
			Key: c.key, Limit: c.lim, Window: c.window, Epoch: c.epoch,
			Total: total, Refilled: min(c.refilled, total), Acked: c.acked, AckedRefilled: c.ackedRefilled,
			Demand: float64(c.hits) / seconds, Estimate: est, Now: rnow,
			Uncertain: named, SeqLow: low,
		})
		grant := int64(-1)
		if l := r.leases[keyLim{c.key, c.lim}]; l != nil {
			grant = l.grant
		}
		r.sent = append(r.sent, sentReport{c: c, total: total, refilled: min(c.refilled, total), hits: c.hits, taken: taken,
			pressure: p.prio == prioPressure, grant: grant, due: c.due, orphan: c.orphan, renew: c.renew})
		c.due, c.orphan, c.renew = false, false, false
		if p.prio == prioPressure {
			c.pressure = false
		}
	}
	return deferred
}

// restore puts back the reasons to report the counters of sent, whose
// reports were not applied (a failed batch, or a key's own fault): the next
// round reports them again. r.mu is held.
func restore(sent []sentReport) {
	for _, s := range sent {
		c := s.c
		c.due, c.orphan, c.renew = c.due || s.due, c.orphan || s.orphan, c.renew || s.renew
		c.pressure = c.pressure || s.pressure
	}
}

// renewals marks the leases due for renewal whose keys are still in use: a
// lease past half its span, on a key the node spent on or was asked for
// since its last report. Unused leases are left to lapse. r.mu is held.
func (r *Reporter) renewals(rnow int64) {
	now := r.deps.Clock.Now()
	for kl, l := range r.leases {
		if l.idle || l.end-rnow > l.span/2 {
			continue // an idle lease is looked at once: after an outage's drain, a lease per key drained
		}
		r.taken = r.deps.Engine.TakeKey(rnow, kl.key, kl.lim, r.taken[:0])
		active := false
		for _, s := range r.taken {
			r.counters.add(s, now)
			active = active || s.Hits > 0
		}
		clear(r.taken)
		c := r.counters.get(keyOf(kl.key, kl.lim, r.windowOf(kl.lim, rnow)), now)
		if c != nil && (active || c.hits > 0) {
			c.renew = true
		} else {
			l.idle = true
		}
	}
}

// expireLeases ends the leases about to lapse: each key goes back to the
// default share. A lease ends a margin early on this node's clock (an
// interval and the clock's uncertainty), so the node never uses a share
// Redis may already have given to another.
func (r *Reporter) expireLeases() {
	_, rnow := r.now()
	_, unc, _ := r.deps.Offset.Estimate()
	margin := int64(r.cfg.Interval)*11/10 + int64(unc)
	r.mu.Lock()
	defer r.mu.Unlock()
	def := r.deps.Engine.DefaultShare()
	for kl, l := range r.leases {
		if l.end-margin <= rnow {
			r.deps.Engine.SetShare(kl.key, kl.lim, def)
			delete(r.leases, kl)
		}
	}
	r.stats.leases.Store(int64(len(r.leases)))
}

// apply acknowledges what each answered report carried, records the lease
// granted, notes lost state and refused keys, and seeds each key with the
// global state in its new share.
func (r *Reporter) apply(reports []remote.Report, sent []sentReport, answers []remote.Answer, rnow int64) {
	type seed struct {
		key     string
		lim     limit.Limit
		state   limit.State
		share   local.Share
		pending int64
		fault   int // 1: mark faulted, -1: clear
	}
	var seeds []seed
	lostKeys, firstLost := 0, ""
	r.mu.Lock()
	for i, a := range answers {
		s, rep := sent[i], reports[i]
		c := s.c
		if a.Err != nil {
			restore(sent[i : i+1])
			if remote.IsKeyFault(a.Err) {
				r.stats.faults.Add(1)
				if len(rep.Uncertain) > 0 {
					r.dropNamed(c, rep.Uncertain)
				}
				if !c.faulted {
					c.faulted = true
					seeds = append(seeds, seed{key: c.key, lim: c.lim, fault: 1})
					r.named1(c.key, "reports: redis refuses this key: deciding it under the fallback until it is fixed",
						"key", c.key, "limit", c.lim.String(), "err", a.Err)
				}
				c.retryAt = r.n + faultRetryRounds
			}
			continue // kept: the next report sends the same totals again
		}
		if c.faulted {
			c.faulted = false
			seeds = append(seeds, seed{key: c.key, lim: c.lim, fault: -1})
			r.log.Info("reports: redis accepts the key again", "key", c.key, "limit", c.lim.String())
		}
		c.acked = max(c.acked, s.total)
		c.ackedRefilled = max(c.ackedRefilled, s.refilled)
		c.hits = max(c.hits-s.hits, 0)
		c.since, c.last = s.taken, s.taken
		if len(rep.Uncertain) > 0 {
			r.settleNamed(c, rep.Uncertain)
		}
		if s.pressure {
			if s.grant >= 0 && absDiff(a.Grant, s.grant)*8 <= max(s.grant, 1) {
				c.backoff = min(c.backoff+1, maxBackoff)
			} else {
				c.backoff = 0
			}
			c.nextPressure = r.n + 1<<c.backoff
		}
		kl := keyLim{c.key, c.lim}
		l := r.leases[kl]
		if l == nil {
			l = &lease{}
			r.leases[kl] = l
		}
		l.grant, l.end, l.span, l.idle = a.Grant, a.LeaseEnd, a.LeaseEnd-a.Now, false
		if a.Lost {
			r.stats.lostState.Add(1)
			if lostKeys++; lostKeys == 1 {
				firstLost = c.key
			}
		}
		if !c.lim.Algorithm.IsBucket() && c.window < r.windowOf(c.lim, rnow) {
			continue // a window left behind: nothing to seed
		}
		seeds = append(seeds, seed{key: c.key, lim: c.lim, state: a.State,
			share: local.Share(min(max(a.Grant, 1), remote.GrantOne)), pending: c.total - s.total})
	}
	r.stats.leases.Store(int64(len(r.leases)))
	r.mu.Unlock()

	e := r.deps.Engine
	for _, sd := range seeds {
		switch sd.fault {
		case 1:
			e.SetFault(sd.key, sd.lim, true)
		case -1:
			e.SetFault(sd.key, sd.lim, false)
		default:
			_ = e.Seed(rnow, sd.key, sd.lim, sd.state, sd.share, sd.pending, true) // validated when it was decided
		}
	}
	if lostKeys > 0 {
		r.log.Warn("reports: redis had lost the state of keys this node had reported (evicted, deleted or rolled back): restored from this node's estimate and its totals applied again",
			"keys", lostKeys, "first", firstLost, "lost_total", r.stats.lostState.Load())
	}
}

// named1 logs msg once per key, for up to maxNamedKeys keys. r.mu is held.
func (r *Reporter) named1(key, msg string, args ...any) {
	if _, ok := r.named[key]; ok || len(r.named) >= maxNamedKeys {
		return
	}
	r.named[key] = struct{}{}
	r.log.Warn(msg, args...)
}

// forget drops counters that no longer matter: everything acknowledged, no
// demand waiting, idle for half the active window, and no lease on the key.
// Redis keeps a node's totals for 60 active windows, so it still holds them
// for any counter the node still has. r.mu is held.
func (r *Reporter) forget(now time.Time, rnow int64) {
	idle := r.cfg.ActiveWindow / 2
	for k, c := range r.counters.m {
		if c.total != c.acked || c.hits != 0 || c.faulted || len(c.uncertain) > 0 || now.Sub(c.last) <= idle {
			continue
		}
		if _, leased := r.leases[keyLim{c.key, c.lim}]; leased && c.window == r.windowOf(c.lim, rnow) {
			continue
		}
		r.counters.remove(k)
	}
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// spendRound runs one round of Sync mode: takes the engine's due spend,
// reports the keys that need it, and seeds them with the answers.
func (r *Reporter) spendRound(ctx context.Context, flush bool) (round.Info, error) {
	if err := r.Lock.Acquire(ctx); err != nil {
		return round.Info{Err: err}, err // a round in flight outlasted ctx
	}
	defer r.Lock.Release()
	if b := r.deps.Breaker; !flush && b.State() == breaker.Open && b.ProbeIn() > 0 {
		// Nothing will reach Redis before the breaker's next probe: leave
		// the spend in the engine, where it waits at no cost, until then.
		return round.Info{Err: breaker.ErrOpen}, breaker.ErrOpen
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
	r.n++
	lost := int64(0)
	for _, s := range r.taken {
		lost += r.counters.add(s, start)
	}
	r.releaseTaken()
	r.renewals(rnow)
	r.takeUnsure(rnow, start)
	lost, r.lostUnsure = lost+r.lostUnsure, 0
	deferred := r.build(rnow, flush)
	r.mu.Unlock()
	if lost > 0 {
		r.losePending(lost)
	}
	info := round.Info{Keys: len(r.reports), Deferred: deferred}
	r.stats.deferred.Add(uint64(deferred))

	// Batch by batch; even a round with nothing to report makes one call,
	// the node's heartbeat.
	var err error
	sent := r.sent
	for from := 0; ; from += r.cfg.BatchSize {
		to := min(from+r.cfg.BatchSize, len(sent))
		if err = r.sendBatch(ctx, from, to); err != nil {
			r.mu.Lock()
			restore(sent[from:])
			r.mu.Unlock()
			break
		}
		if to == len(sent) {
			break
		}
	}
	end := r.deps.Clock.Now()
	info.Duration = end.Sub(start)
	if err != nil {
		r.mu.Lock()
		r.stats.pending.Store(int64(r.counters.unacked()))
		r.stats.pendingBytes.Store(uint64(max(r.counters.bytes, 0)))
		r.mu.Unlock()
		info.Err = err
		return info, err
	}
	info.Nodes = r.deps.Engine.Fleet()
	now := r.deps.Offset.Map(end)
	r.mu.Lock()
	r.forget(end, now)
	r.counters.shrink(&r.peak)
	r.stats.pending.Store(int64(r.counters.unacked()))
	r.stats.pendingBytes.Store(uint64(max(r.counters.bytes, 0)))
	rounds := r.n
	r.mu.Unlock()
	if rounds%sweepEvery == 0 {
		e.Sweep(now, sweepPerShard)
	}
	return info, nil
}

// sendBatch sends reports[from:to] in one call through the breaker, and
// applies the answers.
func (r *Reporter) sendBatch(ctx context.Context, from, to int) error {
	reports, sent, round := r.reports[from:to], r.sent[from:to], r.round
	round.Fleet, round.NoHeartbeat = r.deps.Engine.Fleet(), false
	callSent := r.deps.Clock.Now()
	_, err := breaker.Call(ctx, r.deps.Breaker, r.Timeout(ctx, r.cfg.BatchTimeout), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.deps.Store.Reconcile(ctx, reports, round)
	})
	if err != nil && !errors.Is(err, breaker.ErrOpen) && !errors.Is(err, breaker.ErrBusy) {
		// The breaker may have stopped waiting (a timeout, the caller's
		// context) while the call still runs and reads these buffers: they
		// are the call's now; the next round gets new ones. Whether it
		// reached Redis or not, the next round reports the same totals.
		r.reports, r.sent, r.round = nil, nil, new(remote.Round)
	}
	if err != nil {
		return err
	}
	received := r.deps.Clock.Now()
	if round.HeartbeatFault != nil {
		r.fleetFault(round.HeartbeatFault)
	} else {
		r.deps.Offset.Observe(callSent, time.Unix(0, round.Now), received)
		r.deps.Engine.SetFleet(r.cfg.FleetSize, round.Nodes)
	}
	r.stats.keys.Add(uint64(len(reports)))
	r.apply(reports, sent, round.Answers, r.deps.Offset.Map(received))
	return nil
}

// fleetFault counts a round whose heartbeat Redis refused because the
// fleet's keys hold values of another type, and logs it once: the node's
// reports are still applied, but it learns neither the fleet's size (it
// keeps dividing by the last it knew, or FleetSize) nor Redis's time.
func (r *Reporter) fleetFault(err error) {
	r.stats.faults.Add(1)
	if r.fleetLogged.CompareAndSwap(false, true) {
		r.log.Warn("reports: redis holds a value of another type for the fleet's keys: this node's heartbeat is refused, so it counts the fleet as it last knew it (or FleetSize) until that value is gone; its reports are applied (counted in Stats.KeyFaults; logged once)",
			"err", err, "fleet", r.deps.Engine.Fleet())
	}
}
