package local

import (
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// Asks mode (Config.Asks) is how Async mode's share protocol uses the
// engine. A key is decided in this node's share of its limit: the fleet's
// even split while nobody contests it, or the grant the store holds for this
// node (Hold) while the key is contested; a key whose even split cannot hold
// one request (a burst smaller than the fleet) is pooled: no node holds any
// of it until it is granted some. A request the share cannot admit now is not
// refused: AllowN returns ErrShort and changes nothing, and the caller asks
// the fleet for room (or refuses, when it knows the fleet has none).

// ErrShort is what AllowN returns in Asks mode for a request the node's share
// cannot admit now: the share has no room for it, or the node holds none.
// Only the fleet can decide it. No state changed.
var ErrShort = shortError{}

type shortError struct{}

func (shortError) Error() string { return "local: no room in this node's share" }

// short reports whether a request of weight n on en (uncontested: in share
// even of the fleet) cannot be decided in this node's share at now. The shard
// is locked; en's state has been rolled to now.
func (e *Engine) short(en *entry, p *policy, n int64, now int64) bool {
	if e.unheld(en, p, now) {
		return true
	}
	if en.share >= ShareOne {
		return false // the whole limit is here: the fleet has nothing more to give
	}
	if heavy(p, n, en.share) || p.lim.Algorithm == limit.LeakyBucket && en.share < ShareOne && n > 0 {
		return true // the meter's one-request burst is whole or nothing
	}
	st := en.st
	var res limit.Result
	switch p.lim.Algorithm {
	case limit.TokenBucket:
		tokenBucket(&res, &st, now, p, n, en.share)
	case limit.LeakyBucket:
		leakyMeter(&res, &st, now, p, n, en.share)
	case limit.FixedWindow:
		fixedWindow(&res, &st, now, p, n, en.share)
	case limit.SlidingWindowCounter:
		slidingCounter(&res, &st, now, p, n, en.share)
	default:
		return false
	}
	return !res.Allowed
}

// unheld reports whether the node holds no share of en it may decide in at
// now (Asks mode): a contested key it holds no grant of, or a grant whose
// lease this node cannot vouch for; an uncontested key with no even split.
func (e *Engine) unheld(en *entry, p *policy, now int64) bool {
	if en.has(flagContested) {
		return en.has(flagEmpty) || now > e.validUntil.Load()
	}
	return pooled(p, en.share)
}

// pooled reports whether an uncontested key of p has no even split: one
// request weighs more than share s of its capacity (a leaky meter's is one
// request), so no node decides it alone.
func pooled(p *policy, s Share) bool {
	if s >= ShareOne {
		return false
	}
	if p.lim.Algorithm == limit.LeakyBucket {
		return true
	}
	return heavy(p, 1, s)
}

// SetValidUntil sets the time (Redis's clock, Unix ns) until which this node
// may decide contested keys in the grants it holds: its keeper moves it on
// as it confirms the grants are current. Past it, every request on a
// contested key is short (a process paused past its leases never decides in
// a grant the store has taken back before its keeper has looked).
func (e *Engine) SetValidUntil(t int64) { e.validUntil.Store(t) }

// Hold sets the share a contested key is decided in: the grant s, or none
// (s == 0). Capacity moves with the state it carries: the key's state per
// unit of share is kept, so what the node gives up is as spent as what it
// keeps. It returns whether the engine holds the key (a key it does not hold
// starts, when made, in the share the keeper's Claimed function gives).
func (e *Engine) Hold(key string, lim limit.Limit, s Share) bool {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil {
		return false
	}
	hold(en, s)
	return true
}

// hold makes en contested in share s (none when s == 0).
func hold(en *entry, s Share) {
	en.set(flagContested)
	if s == 0 {
		en.set(flagEmpty)
		return
	}
	if en.has(flagEmpty) {
		// Nothing held until now: no state to keep. It starts spent; the
		// growth that comes with a grant brings the pool's state.
		en.clear(flagEmpty)
		en.share = min(s, ShareOne)
		en.st[1] = 0
		spend(en)
		return
	}
	en.setShare(min(s, ShareOne))
}

// spend sets en's state to wholly spent at its shard's time: what a share
// nobody accounted for holds.
func spend(en *entry) {
	p := en.pol
	switch p.lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		en.st[0] = max(en.st[0], 0) + p.tolerance
	case limit.FixedWindow:
		en.st[1] = int64(en.share) * p.lim.Rate
	case limit.SlidingWindowCounter:
		en.st[2] = int64(en.share) * p.lim.Rate
	}
}

// Release ends a contested key on this node: it is decided in the fleet's
// even split again (or, pooled, in nothing), its state as it is.
func (e *Engine) Release(key string, lim limit.Limit) {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if en := sh.peek(key, lim); en != nil && en.has(flagContested) {
		en.clear(flagContested | flagEmpty)
		en.setShare(Share(e.newKey.Load()))
	}
}

// GrowBy joins growth, a share taken from the fleet's pool in state pool (as
// of now, Redis's µs units as the store keeps it), to the share of a
// contested key: the state becomes the two weighted by their shares, so the
// room the node gains is only what the pool had unspent. It returns whether
// the engine holds the key.
func (e *Engine) GrowBy(now int64, key string, lim limit.Limit, growth Share, pool share.State) bool {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil || growth == 0 {
		return en != nil
	}
	now = sh.at(now)
	if !en.pol.lim.Algorithm.IsBucket() {
		sh.rollWindow(key, en, now)
	}
	// What the node holds, as Snapshot reported it: nothing of a pooled
	// key's even split (it never decided in it), whose fresh state must not
	// join the growth's.
	g := int64(en.share)
	if en.has(flagEmpty) || !en.has(flagContested) && pooled(en.pol, en.share) {
		g = 0
	}
	en.set(flagContested)
	d := min(int64(growth), int64(ShareOne)-g)
	if d <= 0 {
		return true
	}
	mine := snapshot(en, now)
	if g == 0 {
		mine = pool
	}
	p, _ := share.ParamsOf(en.pol.lim)
	joined := p.Merge(g, mine, d, pool)
	if g+d == int64(ShareOne) {
		joined = settle(p, joined)
	}
	en.clear(flagEmpty)
	en.share = Share(g + d)
	setSnapshot(en, now, joined)
	return true
}

// settle takes back the rounding a whole limit's state gathered on its way
// through shares: every step rounds toward spent, by a unit or a ns, so a
// state joined whole again can sit a hair past the exact one and refuse a
// request the exact limiter admits. A window's whole count is a whole number
// of requests (what the fleet admitted); a count within 1/1024 of a request
// above one is that one. A bucket's level gives back 1/1024 of a request.
func settle(p share.Params, x share.State) share.State {
	const hair = share.One / 1024
	snap := func(c int64) int64 {
		if r := c % share.One; r > 0 && r <= hair {
			return c - r
		}
		return c
	}
	switch p.Kind {
	case share.Bucket:
		x.Level = max(x.Level-p.Interval/1024, 0)
	case share.FixedWindow, share.SlidingWindow:
		x.Count, x.Prev = snap(x.Count), snap(x.Prev)
	}
	return x
}

// Shadow is what a token bucket's state says beyond its share's (Snapshot):
// whether the share is full and since when, and the exact bucket's level if
// this node alone admitted since its share was last full.
type Shadow struct {
	// Full is when the share's state became full (Unix ns), or -1 when it
	// is not full.
	Full int64
	// Level is the shadow's level (ns: how far one exact bucket holding the
	// whole limit would run ahead of now), Since when the shadow began (Unix
	// ns: when the share was last full); Level is -1 for a limit with no
	// shadow.
	Level, Since int64
}

// Snap is what a node reports of a key (Snapshot).
type Snap struct {
	// Held is the share the key is decided in (0: none), State its state in
	// the store's units, Shadow a token bucket's shadow.
	Held   Share
	State  share.State
	Shadow Shadow
	// Owed reports that the node admitted on the key while degraded in a
	// share the store does not count (Held is that share): other nodes may
	// have too, each in its own.
	Owed bool
}

// Snapshot returns the share (key, lim) is decided in now, and its state in
// the store's units as of now: what the node reports. A key the engine does
// not hold is made (from the record of its eviction, if it was evicted
// spent), as AllowN would make it. ok is false for a key or limit that is
// not valid.
func (e *Engine) Snapshot(now int64, key string, lim limit.Limit) (s Snap, ok bool) {
	s.Shadow = Shadow{Full: -1, Level: -1}
	if limit.CheckKey(key) != nil {
		return s, false
	}
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en, err := sh.lookup(key, h, lim, Share(e.newKey.Load()))
	if err != nil {
		return s, false
	}
	now = sh.at(now)
	if !en.pol.lim.Algorithm.IsBucket() {
		sh.rollWindow(key, en, now)
	}
	switch {
	case en.has(flagOwed):
		// It admitted while degraded in this share, which the store does
		// not count: reported as held, the store believes it.
		s.Held, s.Owed = en.share, true
		en.clear(flagOwed | flagEmpty)
		en.set(flagContested)
	case en.has(flagContested) && en.has(flagEmpty):
		s.Held = 0
	case en.has(flagContested):
		s.Held = en.share
	default:
		en.setShare(Share(e.newKey.Load()))
		s.Held = en.share
		if pooled(en.pol, s.Held) {
			s.Held = 0
		}
	}
	if en.pol.lim.Algorithm == limit.TokenBucket {
		if en.st[0] <= now {
			// Full, and the shadow (which refills as fast or faster) too.
			s.Shadow.Full, s.Shadow.Level, s.Shadow.Since = max(en.st[0], 0), 0, now
		} else {
			s.Shadow.Level, s.Shadow.Since = max(en.ex-now, 0), en.exSince
		}
	}
	s.State = snapshot(en, now)
	return s, true
}

// Replace makes a contested token bucket's state its shadow, in share s:
// the store answered that the whole fleet's exact state is this node's
// shadow (every other node having spent nothing since it began), which
// replaces this node's share of the state. The shadow as it is now counts
// what the node admitted after it reported. It returns whether the engine
// holds the key.
func (e *Engine) Replace(key string, lim limit.Limit, s Share) bool {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil || en.pol.lim.Algorithm != limit.TokenBucket || s == 0 {
		return false
	}
	en.set(flagContested)
	en.clear(flagEmpty)
	en.share = min(s, ShareOne)
	en.st[0], en.st[1] = en.ex, 0
	return true
}

// snapshot is en's state in the store's units as of now (Unix ns): the
// whole fleet's estimate that en's share stands for, rounded toward spent.
func snapshot(en *entry, now int64) share.State {
	s := int64(max(en.share, 1))
	switch en.pol.lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		return share.State{Level: max(en.st[0]-now, 0)}
	case limit.FixedWindow:
		return share.State{Window: en.st[0], Count: ceilDiv(en.st[1]*int64(ShareOne), s)}
	case limit.SlidingWindowCounter:
		return share.State{Window: en.st[0], Prev: ceilDiv(en.st[1]*int64(ShareOne), s), Count: ceilDiv(en.st[2]*int64(ShareOne), s)}
	}
	return share.State{}
}

// setSnapshot sets en's state from x, as of now, in en's share. A window
// state moves to x's window when x's is later (the store's clock ahead of
// this node's: a window never goes back).
func setSnapshot(en *entry, now int64, x share.State) {
	s := int64(en.share)
	scaled := func(c int64) int64 { return ceilDiv(max(c, 0)*s, int64(ShareOne)) }
	switch en.pol.lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		en.st[0], en.st[1] = now+max(x.Level, 0), 0
	case limit.FixedWindow:
		if x.Window >= en.st[0] {
			en.st[0], en.st[1] = x.Window, scaled(x.Count)
		}
	case limit.SlidingWindowCounter:
		if x.Window >= en.st[0] {
			en.st[0], en.st[1], en.st[2] = x.Window, scaled(x.Prev), scaled(x.Count)
		}
	}
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// Refuse reports (key, lim)'s state at now as the refusal of a request of
// weight n that the fleet has no room for: the demand is counted, nothing is
// spent. The Result is the node's share's (Remaining, RetryAfter).
func (e *Engine) Refuse(now int64, key string, lim limit.Limit, n int64) (limit.Result, error) {
	res, err := e.decide(now, key, lim, 0, false)
	if err != nil {
		return res, err
	}
	res.Allowed = false
	if n > 0 && e.track {
		h := e.hash(key)
		sh := e.shardOf(h)
		sh.mu.Lock()
		if en := sh.peek(key, lim); en != nil {
			sh.record(key, en, n, false, false, sh.at(now))
		}
		sh.mu.Unlock()
	}
	return res, nil
}

// press puts en on its shard's list of keys under pressure (Asks mode): it
// admitted a request and has less than half its share's room left. The
// shard is locked.
func (sh *shard) press(key string, en *entry) {
	en.set(flagDue)
	if len(sh.due) >= 2*sh.keys.Len()+dueKeep {
		sh.compactDue()
	}
	sh.due = append(sh.due, dueRef{key: key, en: en})
}

// Pressed is a key under pressure: in Asks mode, a key whose share had
// less than a quarter of its room left (two requests' room more) after a
// request it admitted; or, Owed,
// a key admitted on while degraded in a share the store does not count,
// which the node must report once the store is back.
type Pressed struct {
	Key   string
	Limit limit.Limit
	Owed  bool
}

// TakePressed appends to dst, and forgets, the keys under pressure since the
// last call (Asks mode): the reconciler asks the fleet for more of those
// whose demand outruns their share before a request is short.
func (e *Engine) TakePressed(dst []Pressed) []Pressed {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for _, d := range sh.due {
			if d.en.has(flagDue) {
				d.en.clear(flagDue)
				dst = append(dst, Pressed{Key: d.key, Limit: d.en.pol.lim, Owed: d.en.has(flagOwed)})
			}
		}
		clear(sh.due)
		sh.due = sh.due[:0]
		if cap(sh.due) > dueKeep {
			sh.due = nil
		}
		sh.mu.Unlock()
	}
	return dst
}
