package local

import "github.com/hybridlimit/hybridlimit/limit"

// Peeking: what a decision would answer, changing nothing. A peek runs the
// very algorithm a decision runs (tokenBucket, fixedWindow, ...), on a copy
// of the key's state taken under the shard's lock, so it cannot drift from
// the decision it reports; the copy is dropped. It creates no entry for a
// key the engine does not hold (so it evicts nothing), leaves the key's
// used bit as it is (keys.go), does not advance the shard's clock, rolls no
// window (its spend stays where the reconciler will find it) and records no
// demand.

// PeekN reports what AllowN(now, key, lim, n) would answer, spending
// nothing and changing no state: a later decision is made exactly as if the
// peek had never happened. Errors are AllowN's: the caller's mistakes, and,
// with spend tracking on, ErrEscalate and ErrFaulted for a request this node
// could not decide alone. In Asks mode a request the node's share cannot
// admit returns ErrShort together with the Result the share
// alone would give it, where AllowN returns none.
func (e *Engine) PeekN(now int64, key string, lim limit.Limit, n int64) (limit.Result, error) {
	return e.peekN(now, key, lim, n, false)
}

// PeekDegraded reports what AllowDegraded(now, key, lim, n) would answer,
// changing nothing, as PeekN does.
func (e *Engine) PeekDegraded(now int64, key string, lim limit.Limit, n int64) (limit.Result, error) {
	return e.peekN(now, key, lim, n, true)
}

// peekN mirrors decide step for step on a copy of the entry.
func (e *Engine) peekN(now int64, key string, lim limit.Limit, n int64, degraded bool) (res limit.Result, err error) {
	if err := limit.CheckKey(key); err != nil {
		return res, err
	}
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.sealed {
		return res, ErrSealed
	}
	now = sh.at(now) // the decision's clamp, without moving the shard's clock
	en, log, err := sh.peekEntry(key, h, lim, Share(e.newKey.Load()), now)
	if err == nil {
		err = en.pol.checkN(n)
	}
	if err != nil {
		return res, err
	}
	degraded = degraded || e.degraded.Load()
	if degraded {
		en.clear(flagEmpty)
		en.setShare(e.degradedShare())
	} else if !en.has(flagContested) {
		en.setShare(Share(e.newKey.Load()))
	}
	if !degraded && e.track && en.has(flagFault) {
		return res, ErrFaulted
	}
	p := en.pol
	if !p.lim.Algorithm.IsBucket() && p.lim.Algorithm != limit.SlidingWindowLog {
		rollCopy(&en, now)
	}
	var short error
	if !degraded && e.asks && n > 0 && e.short(&en, p, n, now) {
		short = ErrShort
	}
	res.Limit = p.lim
	weight := n
	if degraded && n > 0 && heavy(p, n, en.share) {
		weight = 0 // refused as heavier than the degraded share (decide counts it; a peek does not)
	}
	switch p.lim.Algorithm {
	case limit.TokenBucket:
		tokenBucket(&res, &en.st, now, p, weight, en.share)
	case limit.LeakyBucket:
		leakyMeter(&res, &en.st, now, p, weight, en.share)
	case limit.FixedWindow:
		fixedWindow(&res, &en.st, now, p, weight, en.share)
	case limit.SlidingWindowCounter:
		slidingCounter(&res, &en.st, now, p, weight, en.share)
	case limit.SlidingWindowLog:
		slidingLog(&res, &en.st, &log, now, p, weight, en.share)
	}
	if weight != n {
		res.Allowed = false
		res.RetryAfter = p.refill()
	}
	if short != nil {
		res.Allowed = false
	}
	return res, short
}

// peekEntry returns a copy of the entry of (key, lim), or of the entry a
// decision would make for it (in share s, restored from the record of its
// eviction), and for the sliding window log a log of its own to decide in:
// nothing the caller does to either reaches the shard. now is the time the
// peek decides at. The shard is locked.
func (sh *shard) peekEntry(key string, h uint64, lim limit.Limit, s Share, now int64) (entry, eventLog, error) {
	if held := sh.peek(key, lim); held != nil {
		en := *held
		if en.pol.lim.Algorithm != limit.SlidingWindowLog || en.st[1] == 0 {
			return en, eventLog{}, nil
		}
		return en, sh.logs[en.st[1]-1].view(max(now, en.st[0]), en.pol.period), nil
	}
	lim = lim.Canonical()
	if err := lim.Validate(); err != nil {
		return entry{}, eventLog{}, err
	}
	pol, ok := sh.policies[lim]
	if !ok {
		var err error
		if pol, err = newPolicy(lim, sh.zones); err != nil {
			return entry{}, eventLog{}, err
		}
	}
	en := entry{pol: pol, share: s}
	sh.claim(&en, key, lim) // as find makes it
	if lim.Algorithm != limit.SlidingWindowLog {
		sh.restore(&en, h, sh.now) // a bucket's or a window's restore touches only en
		return en, eventLog{}, nil
	}
	// The log's restore, into a log of the peek's own (restore would give
	// the entry a slot in the shard's table of logs).
	var log eventLog
	if freshAt, frac, ok := sh.evictions.bound(limitHash(h, lim), sh.now); ok {
		if n := min(int64(frac*float64(lim.Rate)+0.999999), lim.Rate); n > 0 {
			log.events = []logEvent{{at: freshAt - pol.period, n: n}}
			log.total = n
			en.st[0] = max(en.st[0], freshAt-pol.period)
		}
	}
	return en, log, nil
}

// view returns a log holding l's requests still in the window at now (the
// instant slidingLog will decide at), sharing l's events but never writing
// to them: nothing in it expires at now, so slidingLog moves no head and
// compacts nothing, and an append to the view's full slice copies it.
func (l *eventLog) view(now, period int64) eventLog {
	live := l.live()
	total := l.total
	i := 0
	for i < len(live) && live[i].at+period <= now {
		total -= live[i].n
		i++
	}
	return eventLog{events: live[i:len(live):len(live)], total: total}
}

// rollCopy moves a window algorithm's copied state to now's window, as
// rollWindow does, without keeping the spend it leaves: the held entry
// keeps it.
func rollCopy(en *entry, now int64) {
	w := windowIndex(&en.st, now, en.pol)
	if w == en.st[0] {
		return
	}
	if en.pol.lim.Algorithm == limit.FixedWindow {
		rollFixed(&en.st, w)
	} else {
		rollSliding(&en.st, w)
	}
}
