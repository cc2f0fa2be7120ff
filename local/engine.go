// Package local is the in-memory limiter: sharded state for many keys, every
// algorithm as pure state and integer math, and the spend accounting that
// lets a reconciler report what this node admitted.
//
// A decision touches only the key's shard: a seeded hash picks the shard, the
// shard's lock guards a plain map of its keys, bounded, with a used bit per
// key that picks which key gives way when it is full (keys.go), and the
// algorithm updates a few int64 words. A decision on a key already present
// allocates nothing.
//
// State belongs to a (key, limit) pair: one key under several limits (a
// client under a per-second and a per-hour limit, or under several endpoint
// rules) holds one independent state per limit.
//
// Every method takes the time as a parameter (Unix nanoseconds), as
// golang.org/x/time/rate's *N methods do, so tests walk fixed instants and
// the hybrid limiter can decide on Redis's timeline. Time that goes backwards
// is clamped per shard: state never refills twice.
package local

import (
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/intmath"
	"github.com/hybridlimit/hybridlimit/limit"
)

// DefaultMaxKeys is the number of keys an Engine holds when Config.MaxKeys is
// zero.
const DefaultMaxKeys = 1 << 20

// keysPerShard is the fewest keys a shard is meant to hold on average: a
// small MaxKeys gets fewer shards rather than shards too small to absorb the
// unevenness of hashing.
const keysPerShard = 64

// Config configures an Engine. The zero value is usable: default shards,
// DefaultMaxKeys, no spend tracking.
type Config struct {
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Zero means 64 per CPU (GOMAXPROCS), at least 256, and at
	// most one per 64 keys of MaxKeys: with that many, two deciders rarely
	// meet on one lock.
	Shards int
	// MaxKeys bounds the (key, limit) states held; beyond it the least
	// recently used key of the shard a new key lands in is evicted (its
	// unreported spend is kept for the reconciler, and a record of how
	// spent it was, so it does not come back with a fresh burst; records
	// take 32 bytes per key of MaxKeys, made on a shard's first eviction). Zero
	// means DefaultMaxKeys. The bound is the engine's, not a shard's: it
	// holds MaxKeys keys whatever their spread over shards, give or take a
	// few while a shard that holds none takes its first.
	MaxKeys int
	// TrackSpend records, per key, what was admitted and asked for, and
	// which keys are due for a report: the hybrid limiter's reconciler
	// needs it. Leave it off for a purely local limiter, where nobody would
	// take it.
	TrackSpend bool
	// SpendDue puts a key due for a report once its unreported spend
	// reaches half the node's share of its capacity, not only when a
	// request was denied: for a reconciler that reports spend (Sync mode's
	// degraded spend). In Async mode a key's share bounds what the node may
	// spend on it alone, and only pressure needs Redis; a contested key is
	// due at half its share all the same, so that the reconciler sees its
	// demand outgrow the share before the node denies.
	SpendDue bool
	// KeepOrphans keeps, for the reconciler, the spend that leaves a key's
	// state: of a key evicted, and of a window that rolled over (up to
	// about MaxKeys records at once; beyond, counted by Dropped). A
	// reconciler that reports every spend (Sync mode, or a ledger of usage)
	// needs it; one that needs only pressure does not, and the spend is
	// forgotten with the key (its state is remembered all the same).
	KeepOrphans bool
	// Asks puts the engine in Asks mode (hold.go), Async's share protocol:
	// a request the node's share cannot admit returns ErrShort instead of
	// being refused, and no key is due for a report. It needs TrackSpend.
	Asks bool
}

// Engine holds the state of many keys. It is safe for concurrent use; the
// zero value is not usable, call New.
type Engine struct {
	seed     maphash.Seed
	mask     uint64
	shards   []shard
	track    bool
	spendDue bool
	// keepOrphans keeps the spend of evicted keys and rolled-over windows.
	keepOrphans bool
	claimed     atomic.Pointer[func(key string, lim limit.Limit) (Share, bool)]
	maxKeys     int64
	keys        atomic.Int64 // states held, extras included
	// forgotten counts records of evicted keys lost before they were fresh:
	// the table of a shard was full of live ones (evictions.go).
	forgotten atomic.Uint64
	dropped   atomic.Uint64 // spend dropped because a shard's orphans were full
	// evictions counts keys evicted to hold MaxKeys.
	evictions atomic.Uint64
	// heavyRefused counts requests refused while degraded for being
	// heavier than the node's share (AllowDegraded).
	heavyRefused atomic.Uint64
	zones        limit.Zones // calendar limits' time zones, loaded once
	// asks is Asks mode; validUntil bounds the time its grants are good for
	// (SetValidUntil).
	asks       bool
	validUntil atomic.Int64

	degraded   atomic.Bool
	fleetFixed atomic.Int32 // a configured fleet size; 0 if none
	fleetSeen  atomic.Int32 // the number of nodes last seen active
	// degradedFleet is the least fleet degraded mode divides by, heard
	// while degraded (SetDegradedFleet); 0 if none, and cleared when
	// degraded mode ends.
	degradedFleet atomic.Int32
	newKey        atomic.Uint32 // the Share a new key starts with
}

// maxNodes bounds a fleet size the engine divides by.
const maxNodes = 1 << 15

// Errors AllowN returns for a request the node cannot decide alone. Neither
// changes any state.
var (
	// ErrFaulted: Redis refused this key's state (a key of another type
	// under the limiter's prefix): decide it under the fallback.
	ErrFaulted = errors.New("local: key faulted in redis")
	// ErrSealed: the engine was sealed (Seal): its owner is closing.
	ErrSealed = errors.New("local: engine sealed")
)

// Seal stops every decision that spends: once it returns, no decision can
// record spend the caller would not find in a final TakeSpend. A decision
// already holding its shard's lock finishes first. Sealing is for good.
func (e *Engine) Seal() {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		sh.sealed = true
		sh.mu.Unlock()
	}
}

// New returns an Engine configured by cfg.
func New(cfg Config) (*Engine, error) {
	if cfg.Shards < 0 {
		return nil, fmt.Errorf("local: Shards is negative (%d)", cfg.Shards)
	}
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("local: MaxKeys is negative (%d)", cfg.MaxKeys)
	}
	maxKeys := cfg.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	shards := cfg.Shards
	if shards == 0 {
		shards = min(max(64*runtime.GOMAXPROCS(0), 256), max(maxKeys/keysPerShard, 1))
	}
	shards = ceilPow2(shards)
	// Each shard may hold twice its even part, so hashing's unevenness never
	// evicts while the engine has room; the engine's count enforces MaxKeys.
	perShard := 2*((maxKeys+shards-1)/shards) + 8
	e := &Engine{seed: maphash.MakeSeed(), mask: uint64(shards - 1), shards: make([]shard, shards),
		track: cfg.TrackSpend, spendDue: cfg.SpendDue, keepOrphans: cfg.TrackSpend && cfg.KeepOrphans, maxKeys: int64(maxKeys),
		asks: cfg.TrackSpend && cfg.Asks}
	for i := range e.shards {
		if err := e.shards[i].init(e, perShard, 2*((maxKeys+shards-1)/shards), &e.zones); err != nil {
			return nil, fmt.Errorf("local: %w", err)
		}
	}
	e.SetFleet(0, 1)
	return e, nil
}

func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// hash is a key's seeded hash: it picks the shard, and with the limit, the
// records of evicted keys.
func (e *Engine) hash(key string) uint64 { return maphash.String(e.seed, key) }

func (e *Engine) shardOf(h uint64) *shard { return &e.shards[h&e.mask] }

// limitHash mixes a limit into a key's hash.
func limitHash(h uint64, lim limit.Limit) uint64 {
	x := uint64(lim.Rate)*0x9e3779b97f4a7c15 ^ uint64(lim.Period)*0xc2b2ae3d27d4eb4f ^
		uint64(lim.Burst)*0x165667b19e3779f9 ^ uint64(lim.Algorithm)
	return h ^ mix(x)
}

// AllowN decides whether a request of weight n for key may pass at now (Unix
// nanoseconds) under lim, and spends n if so. n == 0 reports the state
// without spending. Errors are for what the caller got wrong (an invalid key
// or limit, or n beyond the limit's capacity), or, with spend tracking on,
// ErrFaulted for a key Redis refused, which this node cannot decide alone.
func (e *Engine) AllowN(now int64, key string, lim limit.Limit, n int64) (limit.Result, error) {
	return e.decide(now, key, lim, n, false)
}

// AllowDegraded decides like AllowN, but in the degraded share (one over the
// fleet) and never escalating: a request heavier than that share is refused
// (HeavyRefused counts it), since every node deciding alone could admit one
// at once. It is how a node decides while Redis is out of reach, and for a
// faulted key.
func (e *Engine) AllowDegraded(now int64, key string, lim limit.Limit, n int64) (limit.Result, error) {
	return e.decide(now, key, lim, n, true)
}

// Decide is AllowN for the hot path: the limit is read through a pointer
// (neither kept nor changed) and the result written to res, which is left
// as it is on an error. A Limit and a Result copied through each call cost
// more than the decision.
func (e *Engine) Decide(now int64, key string, lim *limit.Limit, n int64, res *limit.Result) error {
	return e.decideTo(now, key, lim, n, false, res)
}

// DecideDegraded is AllowDegraded as Decide is AllowN.
func (e *Engine) DecideDegraded(now int64, key string, lim *limit.Limit, n int64, res *limit.Result) error {
	return e.decideTo(now, key, lim, n, true, res)
}

func (e *Engine) decide(now int64, key string, lim limit.Limit, n int64, degraded bool) (res limit.Result, err error) {
	err = e.decideTo(now, key, &lim, n, degraded, &res)
	return res, err
}

func (e *Engine) decideTo(now int64, key string, lim *limit.Limit, n int64, degraded bool, res *limit.Result) error {
	if err := limit.CheckKey(key); err != nil {
		return err
	}
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	if sh.sealed {
		sh.mu.Unlock()
		return ErrSealed
	}
	en, err := sh.find(key, h, lim, Share(e.newKey.Load()))
	if err == nil {
		err = en.pol.checkN(n)
	}
	if err != nil {
		sh.mu.Unlock()
		return err
	}
	now = sh.clamp(now)
	degraded = degraded || e.degraded.Load()
	// A degraded decision in a share the store does not count (a contested
	// key, or one with no even split) owes the store a report of it.
	owes := degraded && e.asks && (en.has(flagContested) || pooled(en.pol, Share(e.newKey.Load())))
	if degraded {
		// A contested key it held nothing of: it decides in the degraded
		// share from its state as it is, and holds that share from now on.
		en.clear(flagEmpty)
		en.setShare(e.degradedShare())
	} else if !en.has(flagContested) {
		en.setShare(Share(e.newKey.Load())) // the default share follows the fleet's size
	}
	if !degraded && e.track && en.has(flagFault) {
		sh.mu.Unlock()
		return ErrFaulted
	}
	p := en.pol
	if !degraded && e.asks && n > 0 {
		if !p.lim.Algorithm.IsBucket() && p.lim.Algorithm != limit.SlidingWindowLog {
			sh.rollWindow(key, en, now)
		}
		if e.short(en, p, n, now) {
			sh.mu.Unlock()
			return ErrShort
		}
	}
	*res = limit.Result{Limit: p.lim}
	weight := n
	if degraded && n > 0 && heavy(p, n, en.share) {
		// Every node decides in its share, alone: a request heavier than it
		// could pass on every node at once, taking the fleet past the
		// limit. It is refused, reported with the node's state; the
		// reconciler learns of the demand.
		e.heavyRefused.Add(1)
		weight = 0
	}
	switch p.lim.Algorithm {
	case limit.TokenBucket:
		full := en.st[0] <= now
		tokenBucket(res, &en.st, now, p, weight, en.share)
		if e.asks && res.Allowed && weight > 0 {
			shadowAdmit(en, p, weight, now, full)
		} else if e.asks && full {
			en.ex, en.exSince = now, now
		}
	case limit.LeakyBucket:
		leakyMeter(res, &en.st, now, p, weight, en.share)
	case limit.FixedWindow:
		sh.rollWindow(key, en, now)
		fixedWindow(res, &en.st, now, p, weight, en.share)
	case limit.SlidingWindowCounter:
		sh.rollWindow(key, en, now)
		slidingCounter(res, &en.st, now, p, weight, en.share)
	case limit.SlidingWindowLog:
		slidingLog(res, &en.st, sh.logOf(en), now, p, weight, en.share)
	}
	if weight != n {
		res.Allowed = false
		res.RetryAfter = p.refill() // a hint: it passes once Redis is back
	}
	if owes && res.Allowed && weight > 0 {
		en.set(flagOwed)
		if !en.has(flagDue) {
			sh.press(key, en) // reported once the store is back (TakePressed)
		}
	}
	if e.track && n > 0 && !p.calendar() { // calendar limits are untracked (reserve.go)
		sh.record(key, en, n, res.Allowed, degraded, now)
		if e.asks && !degraded && res.Allowed {
			sh.pressIfLow(key, en, p, res.Remaining)
		}
	}
	sh.mu.Unlock()
	return nil
}

// shadowAdmit counts an admission of weight n at now in a token bucket's
// shadow (Asks mode): the level one exact bucket holding the whole limit
// would have had this node alone admitted since its share was last full
// (full: the share was full before this admission).
func shadowAdmit(en *entry, p *policy, n, now int64, full bool) {
	if full {
		en.ex, en.exSince = now, now // its share was full: the shadow starts again from it
	}
	en.ex = max(en.ex, now) + intmath.MulSat(n, p.interval)
}

// pressIfLow puts en under pressure (Asks mode) once less than a quarter
// of its share's room is left after an admission (remaining requests, two
// more counted): a key whose burst covers its demand for long (a burst far
// above its rate) is not contested while it has room to spend, and a key
// running low asks before it is short. The shard is locked.
func (sh *shard) pressIfLow(key string, en *entry, p *policy, remaining int64) {
	if en.share < ShareOne && !en.has(flagDue) && (remaining+2)*4*int64(ShareOne) < int64(en.share)*p.capacity {
		sh.press(key, en)
	}
}

// heavy reports whether a request of weight n can never fit in share s of
// p's capacity: the node's allowance alone could never admit it.
func heavy(p *policy, n int64, s Share) bool {
	return s < ShareOne && n*int64(ShareOne) > int64(s)*p.capacity
}

// RecordN notes that a request of weight n for key was admitted without the
// algorithm being asked (a fail-open decision while Redis is down): its
// spend and demand are recorded for the reconciler, so the global state
// learns of it, and the key's own state is left as it is.
func (e *Engine) RecordN(now int64, key string, lim limit.Limit, n int64) error {
	if err := limit.CheckKey(key); err != nil {
		return err
	}
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.sealed {
		return ErrSealed
	}
	en, err := sh.lookup(key, h, lim, Share(e.newKey.Load()))
	if err == nil {
		err = en.pol.checkN(n)
	}
	if err != nil {
		return err
	}
	now = sh.clamp(now)
	if !lim.Algorithm.IsBucket() && lim.Algorithm != limit.SlidingWindowLog {
		sh.rollWindow(key, en, now)
	}
	if e.track && n > 0 && !en.pol.calendar() {
		sh.record(key, en, n, true, true, now)
	}
	return nil
}

// peek returns the entry of (key, lim) if the shard holds it, without
// touching recency.
func (sh *shard) peek(key string, lim limit.Limit) *entry {
	lim = lim.Canonical()
	en, ok := sh.keys.Peek(key)
	if !ok {
		return nil
	}
	if en.pol.lim == lim {
		return en
	}
	if en.has(flagExtras) {
		for _, x := range sh.extras[key] {
			if x.pol.lim == lim {
				return x
			}
		}
	}
	return nil
}

// Seed sets the state of (key, lim) from the global state g that Redis holds
// (on Redis's timeline), expressed in this node's share s of the limit.
// Spend this node made that g does not hold yet is added on top, counted 1/s
// times as the node's own decisions are: what the engine has not had taken,
// and pending, which the caller took but Redis has not acknowledged. The
// sliding window log has no global state to seed from; Seed leaves its log
// as it is. managed marks a share the caller sets and keeps (a share Redis
// granted); otherwise the key's share follows the fleet's even split.
func (e *Engine) Seed(now int64, key string, lim limit.Limit, g limit.State, s Share, pending int64, managed bool) error {
	if err := limit.CheckKey(key); err != nil {
		return err
	}
	s = min(max(s, 1), ShareOne)
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en, err := sh.lookup(key, h, lim, s)
	if err != nil {
		return err
	}
	now = sh.clamp(now)
	if managed {
		en.set(flagContested)
	} else {
		en.clear(flagContested)
	}
	en.setShare(s)
	pending = max(pending, 0)
	switch p := en.pol; lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		seedTAT(&en.st, p, s, max(g.TAT, 0), pending+int64(en.spent))
	case limit.FixedWindow, limit.SlidingWindowCounter:
		w := sh.rollWindow(key, en, now) // spend of a window left behind goes to the orphans
		if g.Window > w {
			return nil // Redis is a window ahead of this node's clock: wait for the next round
		}
		if g.Window < w {
			pending = 0 // the caller's pending spend belongs to a window left behind
		}
		g.Count = min(max(g.Count, 0), 4*lim.Rate)
		g.Prev = min(max(g.Prev, 0), 4*lim.Rate)
		if lim.Algorithm == limit.FixedWindow {
			seedFixed(&en.st, w, s, g, pending+int64(en.spent))
		} else {
			seedSliding(&en.st, w, s, g, pending+int64(en.spent))
		}
	}
	return nil
}

// SetShare changes the share of (key, lim), if the engine holds it, keeping
// the global estimate its state stands for (a node giving up part of its
// share gives up as much of its spent state): the reconciler's way to end a
// lapsed lease or to shrink to a target. It returns whether the key was held.
func (e *Engine) SetShare(key string, lim limit.Limit, s Share) bool {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil {
		return false
	}
	en.setShare(min(max(s, 1), ShareOne))
	return true
}

// Contest marks (key, lim) as contested, or no longer: a contested key is
// decided in the share the caller sets (SetShare, Grow), starting in s; an
// uncontested one in the fleet's even split. With restore, a key the engine
// does not hold is made from the record of its eviction when it was
// evicted spent, so that its spent state joins the contest. It
// returns whether the engine holds the key (now).
func (e *Engine) Contest(now int64, key string, lim limit.Limit, on bool, s Share, restore bool) bool {
	if limit.CheckKey(key) != nil || lim.Validate() != nil {
		return false
	}
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil && on && restore {
		if _, _, spent := sh.evictions.bound(limitHash(h, lim), sh.at(now)); spent {
			en, _ = sh.lookup(key, h, lim, Share(e.newKey.Load()))
		}
	}
	if en == nil {
		return false
	}
	if on {
		if !en.has(flagContested) {
			en.set(flagContested)
			en.setShare(min(max(s, 1), ShareOne))
		}
	} else if en.has(flagContested) {
		en.clear(flagContested)
		en.setShare(Share(e.newKey.Load()))
	}
	return true
}

// Grow joins growth, a share of the limit taken from the fleet's pool in
// state pool (Redis's, at now), to the share of (key, lim): the state
// becomes the two states weighted by their shares, and the share their sum,
// so the room the node gains is only what the pool had unspent. It returns
// whether the engine holds the key.
func (e *Engine) Grow(now int64, key string, lim limit.Limit, growth Share, pool limit.State) bool {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil || growth == 0 {
		return en != nil
	}
	now = sh.clamp(now)
	g := int64(en.share)
	d := min(int64(growth), int64(ShareOne)-g)
	if d <= 0 {
		return true
	}
	s := Share(g + d)
	switch lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		own := max(en.st[0]-now, 0)
		theirs := max(pool.TAT-now, 0)
		level := (own*g + theirs*d + g + d - 1) / (g + d) // rounded up: never more room than there is
		en.share = s
		en.st[1] = 0
		en.st[0] = now + level
	case limit.FixedWindow, limit.SlidingWindowCounter:
		// The entry holds counts scaled by its share (share times the
		// estimate), so the weighted join is the entry's counts plus the
		// growth times the pool's.
		w := sh.rollWindow(key, en, now)
		var pc, pp int64
		switch pool.Window {
		case w:
			pc, pp = max(pool.Count, 0), max(pool.Prev, 0)
		case w - 1:
			pp = max(pool.Count, 0)
		}
		if lim.Algorithm == limit.FixedWindow {
			en.st[1] += d * pc
		} else {
			en.st[1] += d * pp
			en.st[2] += d * pc
		}
		en.share = s
	}
	return true
}

// SetFault marks (key, lim) as refused by Redis, so that AllowN returns
// ErrFaulted for it until the mark is cleared, or clears the mark.
func (e *Engine) SetFault(key string, lim limit.Limit, on bool) {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil {
		if !on {
			return
		}
		var err error
		if en, err = sh.lookup(key, h, lim, Share(e.newKey.Load())); err != nil {
			return
		}
	}
	if on {
		en.set(flagFault)
	} else {
		en.clear(flagFault)
	}
}

// Charge counts a request of weight n for (key, lim) against its state at
// now, in the key's share, without recording it as spend: a request the
// fleet admitted in Redis (which counted it there), so the node's state
// holds it like one of its own decisions.
func (e *Engine) Charge(now int64, key string, lim limit.Limit, n int64) {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil || n <= 0 {
		return
	}
	now = sh.clamp(now)
	p := en.pol
	switch lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		en.st[0] = max(en.st[0], now) + intmath.MulSat(n, gcraInterval(&en.st, p, en.share))
	case limit.FixedWindow:
		sh.rollWindow(key, en, now)
		en.st[1] += n * int64(ShareOne)
	case limit.SlidingWindowCounter:
		sh.rollWindow(key, en, now)
		en.st[2] += n * int64(ShareOne)
	}
}

// ShareOf returns the share (key, lim) is decided in, and whether the
// engine holds the key.
func (e *Engine) ShareOf(key string, lim limit.Limit) (Share, bool) {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil {
		return 0, false
	}
	if !en.has(flagContested) && !e.degraded.Load() {
		return Share(e.newKey.Load()), true
	}
	return en.share, true
}

// Estimate returns this node's estimate of the global state of (key, lim),
// on Redis's timeline, and whether the engine holds the key: what a node
// offers Redis to restore from when Redis lost the key. It leaves out the
// node's own spend that Redis has not acknowledged: what the engine holds
// untaken, and pending, taken from the engine in window (ignored for the
// buckets) and not acknowledged. That spend reaches Redis in the node's
// reports, which add it to what was restored: in the estimate too, it would
// be charged twice, and scaled up by the node's share, since the engine
// counts it against a share of the limit. The engine's state holds pending
// when it was seeded with it (Seed), as the caller must do.
func (e *Engine) Estimate(key string, lim limit.Limit, pending, window int64) (limit.State, bool) {
	h := e.hash(key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.peek(key, lim)
	if en == nil {
		return limit.State{}, false
	}
	s := int64(max(en.share, 1))
	own := int64(en.spent)
	if lim.Algorithm.IsBucket() || window == en.st[0] {
		own += max(pending, 0)
	}
	switch lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		return limit.State{TAT: en.st[0] - intmath.MulSat(own, gcraInterval(&en.st, en.pol, en.share))}, true
	case limit.FixedWindow:
		return limit.State{Window: en.st[0], Count: max(en.st[1]-own*int64(ShareOne), 0) / s}, true
	case limit.SlidingWindowCounter:
		return limit.State{Window: en.st[0], Prev: en.st[1] / s, Count: max(en.st[2]-own*int64(ShareOne), 0) / s}, true
	}
	return limit.State{}, false
}

// SetClaimed gives the engine the test of whether a key is contested, and
// the share this node holds of it, asked when the engine makes the state of
// a key it does not hold (first seen, or evicted and back): a contested key
// starts in the share Redis accounts this node for, or none at all (its first
// request asks Redis), never in an even split the rest of the fleet has given
// up. It is called under a shard's lock: it must not call the engine. Nil
// means no key is contested.
func (e *Engine) SetClaimed(claimed func(key string, lim limit.Limit) (Share, bool)) {
	if claimed == nil {
		e.claimed.Store(nil)
		return
	}
	e.claimed.Store(&claimed)
}

// SetFleet tells the engine how many nodes share its limits: fixed is a
// configured fleet size (0 for none), which takes priority; seen is the number
// of nodes last seen active. A new key starts with an equal share among them,
// and in degraded mode every key is decided in that share.
func (e *Engine) SetFleet(fixed, seen int) {
	e.fleetFixed.Store(int32(min(max(fixed, 0), maxNodes)))
	e.fleetSeen.Store(int32(min(max(seen, 1), maxNodes)))
	s := ShareOne
	if e.track {
		s = ShareAmong(e.Fleet())
	}
	e.newKey.Store(uint32(s))
}

// SetDegraded switches degraded mode: while on, every key is decided in one
// share over the fleet (the configured fleet size, else the nodes last seen
// active), whatever share Redis had granted it; a node's share of a key is
// never larger than that share while Redis cannot arbitrate. Turning it off
// leaves each key in that share until the reconciler seeds it again.
func (e *Engine) SetDegraded(on bool) {
	e.degraded.Store(on)
	if !on {
		e.degradedFleet.Store(0)
	}
}

// SetDegradedFleet makes degraded mode divide by at least n nodes until it
// ends: a node that hears, while it cannot reach Redis, another node join a
// fleet that may no longer count it (Redis restarted empty) divides by the
// fleet the joiner saw and itself. It never lowers what was set.
func (e *Engine) SetDegradedFleet(n int) {
	n = min(max(n, 0), maxNodes)
	for {
		cur := e.degradedFleet.Load()
		if int32(n) <= cur || e.degradedFleet.CompareAndSwap(cur, int32(n)) {
			return
		}
	}
}

// Degraded reports whether degraded mode is on.
func (e *Engine) Degraded() bool { return e.degraded.Load() }

// Fleet is the node count of the whole fleet: the configured size, else the
// nodes last seen.
func (e *Engine) Fleet() int {
	if f := e.fleetFixed.Load(); f > 0 {
		return int(max(f, e.fleetSeen.Load()))
	}
	return int(e.fleetSeen.Load())
}

// degradedShare is the share every key is decided in while degraded.
func (e *Engine) degradedShare() Share {
	return ShareAmong(max(e.Fleet(), int(e.degradedFleet.Load())))
}

// DefaultShare is the share a key starts in: one over the fleet with spend
// tracking on, the whole limit without.
func (e *Engine) DefaultShare() Share { return Share(e.newKey.Load()) }

// LastActive returns the latest time (ns) a decision or a change of a
// key's state was made on any key: the shards' clocks (bookkeeping, such as
// taking spend or sweeping, does not move them). Zero: never.
func (e *Engine) LastActive() int64 {
	t := int64(0)
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		t = max(t, sh.now)
		sh.mu.Unlock()
	}
	return t
}

// Len returns the number of (key, limit) states held.
func (e *Engine) Len() int { return int(e.keys.Load()) }

// HeavyRefused returns how many requests AllowDegraded (or a decision while
// the engine is degraded) refused since the engine was made for being
// heavier than the node's share of their limit's capacity.
func (e *Engine) HeavyRefused() uint64 { return e.heavyRefused.Load() }

// EvictionsForgotten returns how many records of keys evicted before they
// were fresh were lost since the engine was made, because a shard's table
// of them was full of live records (more keys evicted spent, within their
// refill time, than MaxKeys): each such key may come back fresher than it
// was.
func (e *Engine) EvictionsForgotten() uint64 { return e.forgotten.Load() }

// Evictions returns how many keys were evicted, least recently used first,
// to hold MaxKeys (not counting idle keys a Sweep forgot).
func (e *Engine) Evictions() uint64 { return e.evictions.Load() }

// Dropped returns the spend dropped since the engine was made because a
// shard's orphans were full: admitted, never to be reported.
func (e *Engine) Dropped() uint64 { return e.dropped.Load() }

// privateLevel is this node's own part of en's spent state at now, in
// requests: for a bucket, its share of the estimate's level, rounded up.
// What a spell of degraded spend still weighs on the limit when Redis
// returns: spend made long enough ago has refilled.
func (e *Engine) privateLevel(en *entry, now int64) int64 {
	if !en.pol.lim.Algorithm.IsBucket() {
		return int64(en.spent)
	}
	level := en.st[0] - now
	if level <= 0 {
		return 0
	}
	return intmath.MulDivFloor(level, int64(en.share), int64(ShareOne)*en.pol.interval, 1<<62) + 1
}

// tick is the engine's coarse clock: Unix ms, wrapping every 49 days; entry
// times are compared only within that span.
func tick(now int64) uint32 { return uint32(now / 1_000_000) }

// sinceOf is when en's untaken spend and demand began to accumulate, as Unix
// ns, from its tick.
func (e *Engine) sinceOf(en *entry, now int64) int64 {
	ago := int64(tick(now) - en.since)
	return now - ago*1_000_000
}
