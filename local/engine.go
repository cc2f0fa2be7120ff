// Package local is the in-memory limiter: sharded state for many keys, every
// algorithm as pure state and integer math, and the spend accounting that
// lets a reconciler report what this node admitted.
//
// A decision touches only the key's shard: a seeded hash picks the shard, the
// shard's lock guards an unlocked LRU (hashicorp/golang-lru's simplelru) that
// bounds the number of keys, and the algorithm updates a few int64 words. A
// decision on a key already present allocates nothing.
//
// Every method takes the time as a parameter (Unix nanoseconds), as
// golang.org/x/time/rate's *N methods do, so tests walk fixed instants and
// the hybrid limiter can decide on Redis's timeline. Time that goes backwards
// is clamped per shard: state never refills twice.
package local

import (
	"fmt"
	"hash/maphash"
	"runtime"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/limit"
)

// DefaultMaxKeys is the number of keys an Engine holds when Config.MaxKeys is
// zero.
const DefaultMaxKeys = 1 << 20

// Config configures an Engine. The zero value is usable: default shards,
// DefaultMaxKeys, no spend tracking.
type Config struct {
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Zero means 64 per CPU (GOMAXPROCS), at least 256: with
	// that many, two deciders rarely meet on one lock.
	Shards int
	// MaxKeys bounds the keys held; the least recently used key of a full
	// shard is evicted (its unreported spend is kept for TakeSpend). Zero
	// means DefaultMaxKeys. Each shard holds at most MaxKeys/Shards.
	MaxKeys int
	// TrackSpend records, per key, what was admitted and asked for since the
	// last TakeSpend: the hybrid limiter's reconciler needs it. Leave it off
	// for a purely local limiter, where nobody would take it.
	TrackSpend bool
}

// Engine holds the state of many keys. It is safe for concurrent use; the
// zero value is not usable, call New.
type Engine struct {
	seed   maphash.Seed
	mask   uint64
	shards []shard
	track  bool
	zones  limit.Zones // calendar limits' time zones, loaded once

	degraded   atomic.Bool
	fleetFixed atomic.Int32  // a configured fleet size; 0 if none
	fleetSeen  atomic.Int32  // the number of nodes last seen active
	newKey     atomic.Uint32 // the Share a new key starts with
}

// New returns an Engine configured by cfg.
func New(cfg Config) (*Engine, error) {
	if cfg.Shards < 0 || cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("local: negative shards %d or max keys %d", cfg.Shards, cfg.MaxKeys)
	}
	shards := cfg.Shards
	if shards == 0 {
		shards = max(64*runtime.GOMAXPROCS(0), 256)
	}
	shards = ceilPow2(shards)
	maxKeys := cfg.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	e := &Engine{seed: maphash.MakeSeed(), mask: uint64(shards - 1), shards: make([]shard, shards), track: cfg.TrackSpend}
	for i := range e.shards {
		if err := e.shards[i].init(max(maxKeys/shards, 1), &e.zones); err != nil {
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

func (e *Engine) shardFor(key string) *shard {
	return &e.shards[maphash.String(e.seed, key)&e.mask]
}

// AllowN decides whether a request of weight n for key may pass at now (Unix
// nanoseconds) under lim, and spends n if so. n == 0 reports the state
// without spending. Errors are for what the caller got wrong: an invalid key
// or limit, or n beyond the limit's capacity.
func (e *Engine) AllowN(now int64, key string, lim limit.Limit, n int64) (res limit.Result, err error) {
	if err := limit.CheckKey(key); err != nil {
		return res, err
	}
	sh := e.shardFor(key)
	sh.mu.Lock()
	en, err := sh.lookup(key, lim, Share(e.newKey.Load()))
	if err == nil {
		err = en.pol.checkN(n)
	}
	if err != nil {
		sh.mu.Unlock()
		return res, err
	}
	now = sh.clamp(now)
	en.setShare(e.shareFor(en))
	p := en.pol
	res.Limit = p.lim
	switch p.lim.Algorithm {
	case limit.TokenBucket:
		tokenBucket(&res, &en.st, now, p, n, en.share)
	case limit.LeakyBucket:
		leakyMeter(&res, &en.st, now, p, n, en.share)
	case limit.FixedWindow:
		sh.rollWindow(key, en, now)
		fixedWindow(&res, &en.st, now, p, n, en.share)
	case limit.SlidingWindowCounter:
		sh.rollWindow(key, en, now)
		slidingCounter(&res, &en.st, now, p, n, en.share)
	case limit.SlidingWindowLog:
		slidingLog(&res, &en.st, sh.logOf(en), now, p, n, en.share)
	}
	if e.track && n > 0 && !p.calendar() { // see untracked
		sh.record(key, en, n, res.Allowed)
	}
	sh.mu.Unlock()
	return res, nil
}

// RecordN notes that a request of weight n for key was admitted without the
// algorithm being asked (a fail-open decision while Redis is down): its
// spend and demand are recorded for the reconciler, so the global state
// learns of it, and the key's own state is left as it is.
func (e *Engine) RecordN(now int64, key string, lim limit.Limit, n int64) error {
	if err := limit.CheckKey(key); err != nil {
		return err
	}
	sh := e.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en, err := sh.lookup(key, lim, Share(e.newKey.Load()))
	if err == nil {
		err = en.pol.checkN(n)
	}
	if err != nil {
		return err
	}
	if !lim.Algorithm.IsBucket() && lim.Algorithm != limit.SlidingWindowLog {
		sh.rollWindow(key, en, sh.clamp(now))
	}
	if e.track && n > 0 && !en.pol.calendar() { // see untracked
		sh.record(key, en, n, true)
	}
	return nil
}

// Calendar limits are untracked: their spend is never recorded for the
// reconciler, whose Redis side counts windows of a fixed Period from the
// epoch. The hybrid limiter decides them in Redis (Sync) or in memory alone
// (LocalOnly, and Sync while degraded, whose spend Redis then never
// learns).

// Seed sets key's state from the global state g that Redis holds (on Redis's
// timeline), expressed in this node's share s of the limit, with nodes the
// number of nodes active on the key. Spend this node made and has not yet had
// taken is added on top, counted 1/s times as the node's own decisions are.
// The sliding window log has no global state to seed from; Seed leaves its
// log as it is.
func (e *Engine) Seed(now int64, key string, lim limit.Limit, g limit.State, s Share, nodes int) error {
	if err := limit.CheckKey(key); err != nil {
		return err
	}
	s = min(max(s, 1), ShareOne)
	sh := e.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en, err := sh.lookup(key, lim, s)
	if err != nil {
		return err
	}
	now = sh.clamp(now)
	en.setNodes(nodes)
	en.setShare(s)
	switch p := en.pol; lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		// Never trust a state further ahead than a full tolerance of debt.
		seedTAT(&en.st, p, s, min(max(g.TAT, 0), now+2*p.tolerance), en.spent)
	case limit.FixedWindow, limit.SlidingWindowCounter:
		w := sh.rollWindow(key, en, now)
		if g.Window > w {
			return nil // Redis is a window ahead of this node's clock: wait for the next round
		}
		g.Count = min(max(g.Count, 0), 2*lim.Rate)
		g.Prev = min(max(g.Prev, 0), 2*lim.Rate)
		if lim.Algorithm == limit.FixedWindow {
			seedFixed(&en.st, w, s, g, en.spent)
		} else {
			seedSliding(&en.st, w, s, g, en.spent)
		}
	}
	return nil
}

// SetFleet tells the engine how many nodes share its limits: fixed is a
// configured fleet size (0 for none), which takes priority; seen is the number
// of nodes last seen active. A new key starts with an equal share among them,
// and in degraded mode a key whose own node count is unknown uses it.
func (e *Engine) SetFleet(fixed, seen int) {
	e.fleetFixed.Store(int32(min(max(fixed, 0), maxNodes)))
	e.fleetSeen.Store(int32(min(max(seen, 1), maxNodes)))
	s := ShareOne
	if e.track {
		s = ShareAmong(e.fleet())
	}
	e.newKey.Store(uint32(s))
}

// SetDegraded switches degraded mode: while on, every key's share is one over
// the configured fleet size, else over the nodes last seen active on the key,
// else over the nodes last seen in the fleet. Turning it off leaves each key in
// that share until the reconciler seeds it again.
func (e *Engine) SetDegraded(on bool) { e.degraded.Store(on) }

// Degraded reports whether degraded mode is on.
func (e *Engine) Degraded() bool { return e.degraded.Load() }

// fleet is the node count of the whole fleet: the configured size, else the
// nodes last seen.
func (e *Engine) fleet() int {
	if f := e.fleetFixed.Load(); f > 0 {
		return int(f)
	}
	return int(e.fleetSeen.Load())
}

// shareFor is the share en is decided in: its own, or the degraded share.
func (e *Engine) shareFor(en *entry) Share {
	if !e.degraded.Load() {
		return en.share
	}
	if e.fleetFixed.Load() == 0 && en.nodes() > 0 {
		return ShareAmong(en.nodes())
	}
	return ShareAmong(e.fleet())
}

// Len returns the number of keys held.
func (e *Engine) Len() int {
	n := 0
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		n += sh.keys.Len()
		sh.mu.Unlock()
	}
	return n
}
