package hybrid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/sync/async"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
	"github.com/hybridlimit/hybridlimit/sync/reports"
	"github.com/hybridlimit/hybridlimit/sync/round"
)

// janitorEvery is how often a local-only limiter forgets idle keys.
const janitorEvery = time.Second

// Limiter rate-limits keys across a fleet of nodes. It is safe for
// concurrent use. Make one with New and Close it when done.
type Limiter struct {
	cfg    Config
	mode   Mode
	clock  clock.Clock
	offset *clock.Offset
	engine *local.Engine
	log    *slog.Logger

	// Nil in LocalOnly mode; one of sync and async, the reconciler, by mode.
	store      *remote.Store
	breaker    *breaker.Breaker
	reconciler reconciler
	sync       *reports.Reporter
	async      *async.Runner

	closed    atomic.Bool
	lost      atomic.Uint64 // sync decisions on keys whose state Redis had lost
	lostMu    sync.Mutex
	lostKeys  map[string]struct{} // keys named in the log already
	heavyLog  atomic.Bool         // a heavy request refused while degraded was logged
	askLate   atomic.Uint64       // requests refused because AskWait ended before the fleet made room
	askLog    atomic.Bool         // such a refusal was logged
	forgotLog atomic.Bool         // a forgotten eviction was logged
	stop      context.CancelFunc
	done      sync.WaitGroup

	faults     faultState
	startNodes atomic.Int64 // nodes in the fleet at first contact, until a round says

	// realClock: the clock is clock.Real, and the offset's base a reading of
	// it, so now reads the monotonic clock alone (Offset.MapNow).
	realClock bool
}

// reconciler is what both modes' reconcilers do for the limiter.
type reconciler interface {
	Run(context.Context)
	Start(context.Context) error
	Round(context.Context) error
	Flush(context.Context) error
	Unreported() int
	Stats() round.Stats
}

// New returns a Limiter configured by cfg and starts its background work
// (the reconciler, or in LocalOnly mode a janitor that forgets idle keys).
// With a Redis client it first makes contact, within cfg.StartupTimeout:
// loads the scripts, reads the eviction policy (and warns if it can evict
// the limiter's keys), and beats the node's heartbeat, learning the clock
// offset and the fleet. If Redis does not answer it returns an error
// wrapping ErrRedisUnavailable, unless cfg.StartDegraded.
func New(cfg Config) (*Limiter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	mode := cfg.effectiveMode()
	engine, err := local.New(local.Config{MaxKeys: cfg.MaxKeys, TrackSpend: mode != LocalOnly, SpendDue: mode == Sync,
		KeepOrphans: mode == Sync || cfg.Ledger, Asks: mode == Async})
	if err != nil {
		return nil, fmt.Errorf("hybrid: %w", err)
	}
	l := &Limiter{cfg: cfg, mode: mode, clock: cfg.Clock, offset: clock.NewOffset(cfg.Clock.Now()), engine: engine, log: cfg.Logger,
		lostKeys: make(map[string]struct{})}
	_, l.realClock = cfg.Clock.(clock.Real)
	ctx, stop := context.WithCancel(context.Background())
	l.stop = stop
	if mode == LocalOnly {
		l.done.Add(1)
		go l.janitor(ctx)
		return l, nil
	}
	if err := l.connect(); err != nil {
		stop()
		return nil, err
	}
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		l.reconciler.Run(ctx)
	}()
	return l, nil
}

// connect builds the Redis side and makes first contact.
func (l *Limiter) connect() error {
	cfg := l.cfg
	store, err := remote.New(cfg.Redis, remote.Options{Prefix: cfg.Prefix, Node: cfg.Node, ActiveWindow: cfg.ActiveWindow,
		Lease: cfg.Lease, ShortLease: cfg.ShortLease, LedgerTTL: cfg.LedgerTTL, Now: l.now})
	if err != nil {
		return fmt.Errorf("hybrid: %w", err)
	}
	l.store = store
	l.breaker = breaker.New(breaker.Settings{
		Name:         "redis",
		Timeout:      cfg.RedisTimeout,
		OpenFor:      cfg.BreakerOpenFor,
		Failures:     cfg.BreakerFailures,
		Inline:       deadlinesReachSockets(cfg.Redis),
		IsSuccessful: isCallerError,
		// A key of another type says nothing about Redis's health, neither
		// way: it is the key's fault, decided under the fallback and counted
		// in Faults, never a success that hides it.
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || errors.Is(err, remote.ErrCanceled) || remote.IsKeyFault(err)
		},
		// Under the breaker's lock: an atomic store, nothing more.
		OnStateChange: func(_, to breaker.State) { l.engine.SetDegraded(to != breaker.Closed) },
		// Outside it: the log.
		OnTransition: l.transition,
	})
	l.offset.OnStep(l.clockStep)
	if l.mode == Async {
		l.async, err = async.New(async.Config{
			Interval:     cfg.SyncInterval,
			AskWait:      cfg.AskWait,
			Lease:        cfg.Lease,
			HomeLease:    cfg.HomeLease,
			ActiveWindow: cfg.ActiveWindow,
			FleetSize:    cfg.FleetSize,
			MaxPending:   cfg.MaxPending,
			Ledger:       cfg.Ledger,
			Logger:       cfg.Logger,
			OnRound:      l.afterRound,
		}, async.Deps{Engine: l.engine, Store: store, Breaker: l.breaker, Clock: l.clock, Offset: l.offset})
		l.reconciler = l.async
	} else {
		l.sync, err = reports.New(reports.Config{
			Interval:        cfg.SyncInterval,
			FleetSize:       cfg.FleetSize,
			ActiveWindow:    cfg.ActiveWindow,
			MaxPending:      cfg.MaxPending,
			MaxReports:      cfg.MaxReports,
			MaxPendingBytes: cfg.MaxPendingBytes,
			Logger:          cfg.Logger,
			OnRound:         l.afterRound,
		}, reports.Deps{Engine: l.engine, Store: store, Breaker: l.breaker, Clock: l.clock, Offset: l.offset})
		l.reconciler = l.sync
	}
	if err != nil {
		return fmt.Errorf("hybrid: %w", err)
	}
	// First contact, all of it within StartupTimeout (not the per-call
	// timeouts: a slow Redis at start is not a dead one).
	ctx, cancel := context.WithTimeout(context.Background(), cfg.StartupTimeout)
	defer cancel()
	err = l.firstContactBy(ctx, cfg.StartupTimeout)
	if err != nil {
		if !cfg.StartDegraded {
			return fmt.Errorf("%w: %w", ErrRedisUnavailable, err)
		}
		if cfg.Fallback == Conservative && cfg.FleetSize == 0 {
			return fmt.Errorf("%w: %w (starting degraded with the %v fallback needs FleetSize: a node that has never seen the fleet in redis would take each limit whole)", ErrRedisUnavailable, err, cfg.Fallback)
		}
		l.log.Warn("hybrid: starting degraded: redis unavailable", "err", err, "fleet_size", cfg.FleetSize)
		l.engine.SetDegraded(true)
		l.noteDegraded()
	}
	return nil
}

// firstContactBy runs firstContact on a goroutine of its own and returns
// by ctx's deadline whatever the client does: a client without
// ContextTimeoutEnabled (go-redis's default) waits on its own read timeout,
// three seconds a try, and not on ctx. An attempt still in flight then is
// abandoned: it ends on the client's timeouts, and its round, if it was in
// one, holds the reconciler's round lock until then.
func (l *Limiter) firstContactBy(ctx context.Context, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- l.firstContact(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // it ended at the same moment: its error says more
			return err
		default:
		}
		return fmt.Errorf("hybrid: no answer from redis within the startup timeout (%v): %w", timeout, context.Cause(ctx))
	}
}

// firstContact loads the scripts, checks the eviction policy and beats the
// first heartbeat, trying again (after 50 ms, then twice as long each time)
// until one attempt succeeds or ctx ends: a call that fails on the client's
// own timeouts (a loaded machine, a slow network) is not a dead Redis.
func (l *Limiter) firstContact(ctx context.Context) error {
	wait := 50 * time.Millisecond
	checked := false
	for {
		err := l.store.Ping(ctx)
		if err == nil && !checked {
			l.checkEviction(ctx)
			checked = true
		}
		if err == nil {
			err = l.heartbeat(ctx)
		}
		if err == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 2
	}
}

// heartbeat runs the node's first round, with nothing spent yet: the fleet
// learns of the node, and the node learns the fleet and Redis's clock.
func (l *Limiter) heartbeat(ctx context.Context) error {
	if err := l.reconciler.Start(ctx); err != nil {
		return err
	}
	l.startNodes.Store(int64(l.reconciler.Stats().Nodes))
	return nil
}

// afterRound ends degraded mode once a round succeeds with the breaker
// closed. The breaker's own transitions switch degraded mode at once; this
// also ends a start that was degraded before the breaker saw any failure.
func (l *Limiter) afterRound(info round.Info) {
	l.checkForgotten()
	l.watchEvictions()
	if info.Err == nil && l.breaker.Healthy() {
		l.engine.SetDegraded(false)
		l.noteDegraded()
	}
	if l.cfg.OnRound != nil {
		l.cfg.OnRound(info)
	}
}

// checkForgotten logs, once, that the engine lost records of keys evicted
// before they were fresh (Stats().EvictionsForgotten counts them).
func (l *Limiter) checkForgotten() {
	if n := l.engine.EvictionsForgotten(); n > 0 && l.forgotLog.CompareAndSwap(false, true) {
		l.log.Warn("hybrid: more keys were evicted spent, within their refill time, than the memory of evictions holds: a key coming back may find more than it had left; raise MaxKeys to the keys active within a limit's refill time (counted in Stats().EvictionsForgotten; logged once)",
			"forgotten", n, "max_keys", l.cfg.MaxKeys)
	}
}

// deadlinesReachSockets reports whether client applies context deadlines to
// its sockets (go-redis's ContextTimeoutEnabled), so the breaker may run calls
// inline instead of abandoning them on a goroutine at their timeout.
func deadlinesReachSockets(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// janitor forgets idle keys of a local-only limiter.
func (l *Limiter) janitor(ctx context.Context) {
	defer l.done.Done()
	t := time.NewTicker(janitorEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.engine.Sweep(l.now(), 256)
			l.checkForgotten()
		}
	}
}

// Mode returns the mode the limiter runs in (LocalOnly when it has no Redis).
func (l *Limiter) Mode() Mode { return l.mode }

// Fallback returns what the limiter does while degraded. A middleware uses it
// to answer a FailClosed denial with 503 rather than 429.
func (l *Limiter) Fallback() Fallback { return l.cfg.Fallback }

// Degraded reports whether the limiter is deciding under its fallback
// because Redis failed.
func (l *Limiter) Degraded() bool { return l.engine.Degraded() }

// now is the limiter's time for a decision: this node's clock mapped onto
// Redis's, in Unix ns.
func (l *Limiter) now() int64 {
	if l.realClock {
		return l.offset.MapNow()
	}
	return l.offset.Map(l.clock.Now())
}

// Now returns the limiter's clock, aligned to Redis server TIME once the
// first round has measured the offset, and never going backwards: what
// X-RateLimit-Reset should count from.
func (l *Limiter) Now() time.Time { return time.Unix(0, l.offset.Now(l.clock.Now())) }

// Allow is shorthand for AllowN(ctx, key, lim, 1).
func (l *Limiter) Allow(ctx context.Context, key string, lim Limit) (d Decision, err error) {
	err = l.allowN(ctx, key, &lim, 1, &d) // not AllowN: small enough to inline, it decides into the caller's Decision
	return d, err
}

// AllowN decides whether a request of weight n for key may pass under lim,
// and spends n if so. n == 0 reports the state without spending.
//
// An error is the caller's mistake: an empty or oversized key, an invalid
// limit, n above the limit's capacity, an algorithm the mode cannot run
// (ErrUnsupported), a closed limiter. Redis trouble is never an error: the
// Decision's Source is Degraded. ctx bounds the call to Redis in Sync mode:
// if it ends before Redis answers, the decision is made from memory under
// the Fallback (Source Degraded), and, being the caller's deadline, it does
// not count against Redis in the breaker. A key whose Redis value is of
// another type is decided under the Fallback too (and counted in
// Stats.Faults). The Async and LocalOnly paths never block and ignore ctx.
func (l *Limiter) AllowN(ctx context.Context, key string, lim Limit, n int64) (d Decision, err error) {
	err = l.allowN(ctx, key, &lim, n, &d)
	return d, err
}

// allowN decides into d, which is zero. The limit and the decision travel by
// pointer down the paths that decide from memory (LocalOnly, Async with room,
// degraded under Conservative): copied through each call, they cost more
// than the decision itself. lim is AllowN's copy: it is made canonical in
// place. Allow and AllowN call it alone, so that they inline: every
// error it returns is the caller's (a sealed engine is ErrClosed, d zero).
func (l *Limiter) allowN(ctx context.Context, key string, lim *Limit, n int64, d *Decision) (err error) {
	if l.closed.Load() {
		return ErrClosed
	}
	if lim.Burst == lim.Rate && lim.Algorithm.IsBucket() {
		lim.Burst = 0 // lim.Canonical(), without the copies
	}
	switch l.mode {
	case LocalOnly:
		if err = l.engine.Decide(l.now(), key, lim, n, &d.Result); err != nil { // d.Source is Local, the zero value
			return closedIfSealed(err, d)
		}
		return nil
	case Sync:
		*d, err = l.syncAllow(ctx, key, *lim, n)
		return closedIfSealed(err, d)
	}
	if err := asyncSupports(lim); err != nil {
		return err
	}
	if l.engine.Degraded() {
		if l.cfg.Fallback == Conservative {
			err = l.conservative(key, lim, n, d)
		} else {
			*d, err = l.degraded(key, *lim, n)
		}
		return closedIfSealed(err, d)
	}
	now := l.now()
	switch err = l.engine.Decide(now, key, lim, n, &d.Result); err {
	case nil:
		return nil // d.Source is Local, the zero value
	case local.ErrShort:
		*d, err = l.ask(ctx, now, key, *lim, n)
	case local.ErrFaulted:
		*d, err = l.degraded(key, *lim, n) // Redis refuses this key: the fallback decides it
	}
	return closedIfSealed(err, d)
}

// closedIfSealed is err, unless the engine was sealed: then Close began
// after allowN's check, and the call gets ErrClosed and a zero Decision.
func closedIfSealed(err error, d *Decision) error {
	if err == local.ErrSealed {
		*d = Decision{}
		return ErrClosed
	}
	return err
}

// ask decides a request this node's share could not admit at now (Async):
// the node asks the fleet for room and the request waits, at most AskWait
// and ctx, for the answer. The fleet's pool may admit it at once (Source
// Remote); a share that grew decides it in memory (Source Local). It is
// refused at once when the fleet is known to have no room before AskWait
// (or ever, with AskWait negative), and decided under the fallback while
// the breaker is open.
func (l *Limiter) ask(ctx context.Context, now int64, key string, lim Limit, n int64) (Decision, error) {
	deadline := now + int64(l.async.AskWait())
	if d, ok := ctx.Deadline(); ok {
		deadline = min(deadline, now+int64(time.Until(d)))
	}
	asked := now
	waited := false
	for {
		ans := l.async.Ask(ctx, now, asked, key, lim, n, deadline)
		if l.closed.Load() {
			// Close began while it waited: it is refused, as the limiter
			// stops (its node gave its shares back).
			return Decision{Result: limit.Result{Limit: lim, RetryAfter: l.cfg.SyncInterval}, Source: Local}, nil
		}
		switch ans.Verdict {
		case protocol.Unreachable:
			return l.degraded(key, lim, n)
		case protocol.Admitted:
			res, _ := l.engine.AllowN(l.now(), key, lim, 0) // the node's own state: the pool admitted it
			res.Limit, res.Allowed, res.RetryAfter = lim, true, 0
			return Decision{Result: res, Source: Remote}, nil
		case protocol.Retry:
			waited = true
			now = l.now()
			res, err := l.engine.AllowN(now, key, lim, n)
			switch {
			case err == nil:
				return Decision{Result: res, Source: Local}, nil
			case errors.Is(err, local.ErrFaulted):
				return l.degraded(key, lim, n)
			case !errors.Is(err, local.ErrShort):
				return Decision{}, err
			case now >= deadline:
				l.askTimedOut(key, lim)
				return l.refuse(now, key, lim, n, 0, true)
			}
		case protocol.Expired:
			l.askTimedOut(key, lim)
			return l.refuse(l.now(), key, lim, n, ans.Until, true)
		default: // Refuse
			return l.refuse(l.now(), key, lim, n, ans.Until, waited)
		}
	}
}

// askTimedOut counts, and logs once, a request refused because AskWait
// ended before the fleet made room for it: the fleet may have had the
// room, so an exact limiter might have admitted it.
func (l *Limiter) askTimedOut(key string, lim Limit) {
	l.askLate.Add(1)
	if l.askLog.CompareAndSwap(false, true) {
		l.log.Warn("hybrid: a request beyond this node's share was refused when AskWait ended, before the fleet made room for it: on a loaded machine or a slow Redis, raise AskWait (counted in Stats().AskTimeouts; logged once)",
			"key", key, "limit", lim.String(), "ask_wait", l.async.AskWait())
	}
}

// refuse refuses a request the fleet has no room for (until, Unix ns on
// Redis's clock, when known), counting its demand. Source is Remote when
// the node asked the fleet, Local when it knew already.
func (l *Limiter) refuse(now int64, key string, lim Limit, n, until int64, asked bool) (Decision, error) {
	res, err := l.engine.Refuse(now, key, lim, n)
	if err != nil {
		return Decision{}, err
	}
	res.Limit, res.Allowed = lim, false
	if until > now {
		res.RetryAfter = max(res.RetryAfter, time.Duration(until-now))
	}
	res.RetryAfter = max(res.RetryAfter, time.Millisecond)
	src := Local
	if asked {
		src = Remote
	}
	return Decision{Result: res, Source: src}, nil
}

// syncAllow decides in Redis, or from memory when Redis fails. A call that
// timed out may still have reached Redis: its request, decided again in
// memory and admitted there, is reported naming the call, so it is counted
// once either way.
func (l *Limiter) syncAllow(ctx context.Context, key string, lim Limit, n int64) (Decision, error) {
	if l.breaker.State() == breaker.Open {
		return l.degraded(key, lim, n) // no waiting on Redis while it is open
	}
	seq, low := l.sync.Begin()
	known := remote.Known{Seq: seq, Low: low, Now: l.now()}
	known.Estimate = l.sync.Estimate(key, lim)
	d, err := breaker.Call(ctx, l.breaker, 0, func(ctx context.Context) (remote.Decision, error) {
		l.countCall(ctx)
		return l.store.AllowNKnown(ctx, key, lim, n, known)
	})
	if err == nil {
		l.sync.Settle(seq)
		if d.Lost {
			l.lostState(key, lim)
		}
		l.keepWarm(key, lim, d)
		return Decision{Result: d.Result, Source: Remote}, nil
	}
	if isCallerError(err) {
		l.sync.Settle(seq)
		return Decision{}, err
	}
	if remote.IsKeyFault(err) {
		l.keyFault(key, err)
	}
	dec, derr := l.degraded(key, lim, n)
	if derr == nil && dec.Allowed && n > 0 && mayHaveRun(err) {
		l.sync.Uncertain(key, lim, seq, n) // settled when the report naming it is acknowledged
	} else {
		l.sync.Settle(seq)
	}
	return dec, derr
}

// lostState counts and logs, once per key, a key whose state Redis had lost
// while this node knew it had spent: Redis restored it from the node's
// estimate before deciding.
func (l *Limiter) lostState(key string, lim Limit) {
	n := l.lost.Add(1)
	l.lostMu.Lock()
	_, seen := l.lostKeys[key]
	if !seen && len(l.lostKeys) < maxLoggedLost {
		l.lostKeys[key] = struct{}{}
	} else {
		seen = true
	}
	l.lostMu.Unlock()
	if !seen {
		l.log.Warn("hybrid: redis had lost the state of a key this node had spent on (evicted or deleted): restored from this node's estimate",
			"key", key, "limit", lim.String(), "lost_total", n)
	}
}

// maxLoggedLost bounds the keys named in lost-state logs; beyond it they are
// counted (Stats.StateLost) without a line each.
const maxLoggedLost = 1024

// mayHaveRun reports whether a failed call may nonetheless have run in
// Redis: it timed out after it was sent.
func mayHaveRun(err error) bool {
	return errors.Is(err, breaker.ErrTimeout) || errors.Is(err, remote.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// keepWarm copies a key's global state into memory after a Sync decision,
// so the node starts from it if Redis fails, with the spend this node has
// reported and Redis not yet acknowledged on top, as a round seeds it: what
// the engine holds of its own spend is what its estimate leaves out. While
// a round holds the reporter the pending is not known: the state is warmed
// without it (an estimate made before the next seed may then err low by
// that pending at the node's share), never left a decision behind, which a
// key Redis keeps losing is restored from (TestEvictionsAreLoggedAndCounted
// admitted 101 of 100 when it was).
func (l *Limiter) keepWarm(key string, lim Limit, d remote.Decision) {
	if lim.Algorithm == limit.SlidingWindowLog {
		return
	}
	// The pending is 0 when unknown.
	pending, _, _ := l.sync.Pending(key, lim)
	_ = l.engine.Seed(l.now(), key, lim, d.State, l.engine.DefaultShare(), pending, false) // validated by the decision
}

// fleet is the number of nodes the limit is divided among by default.
func (l *Limiter) fleet() int {
	if l.cfg.FleetSize > 0 {
		return l.cfg.FleetSize
	}
	if l.reconciler != nil {
		if n := l.reconciler.Stats().Nodes; n > 0 {
			return n
		}
	}
	return max(int(l.startNodes.Load()), 1)
}

// degraded decides from memory under the fallback: while Redis is out of
// reach, and for a key Redis refuses. Conservative decides in one share over
// the fleet.
func (l *Limiter) degraded(key string, lim Limit, n int64) (Decision, error) {
	switch l.cfg.Fallback {
	case FailOpen:
		now := l.now()
		res, err := l.engine.AllowDegraded(now, key, lim, n)
		if err != nil {
			return Decision{}, err
		}
		if !res.Allowed {
			if err := l.engine.RecordN(now, key, lim, n); err != nil {
				return Decision{}, err
			}
			res.Allowed, res.RetryAfter = true, 0
		}
		return Decision{Result: res, Source: Degraded}, nil
	case FailClosed:
		res, err := l.engine.AllowDegraded(l.now(), key, lim, 0) // validates, and reports without spending
		if err != nil {
			return Decision{}, err
		}
		res.Allowed = false
		res.RetryAfter = max(l.breaker.ProbeIn(), time.Millisecond)
		return Decision{Result: res, Source: Degraded}, nil
	}
	var d Decision
	err := l.conservative(key, &lim, n, &d)
	return d, err
}

// conservative is degraded under the Conservative fallback, deciding into
// d (which is zero) in one share over the fleet.
func (l *Limiter) conservative(key string, lim *Limit, n int64, d *Decision) error {
	before := l.engine.HeavyRefused()
	d.Source = Degraded
	err := l.engine.DecideDegraded(l.now(), key, lim, n, &d.Result)
	if l.engine.HeavyRefused() != before && l.heavyLog.CompareAndSwap(false, true) {
		l.log.Warn("hybrid: degraded: refusing requests heavier than this node's share of their limit, which every node could admit at once (counted in Stats().HeavyRefused; logged once)",
			"key", key, "limit", lim.String(), "n", n)
	}
	return err
}

// Close stops the limiter's background work and reports, in a last round,
// what this node spent and had not reported yet; if that round fails and ctx
// has a deadline, it tries again until the deadline. It returns by ctx's
// deadline whatever the Redis client's options, also with a round in flight
// on a Redis that stopped answering (that round then ends on its own, at its
// timeout), and returns an error if some spend was not reported, saying on
// how many keys. Decisions after Close return ErrClosed. Close does not close
// the Redis client, which stays the caller's.
func (l *Limiter) Close(ctx context.Context) error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	l.engine.Seal() // a decision racing Close either recorded its spend already or is refused
	l.stop()
	stopped := make(chan struct{})
	go func() {
		l.done.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		if l.reconciler == nil {
			return nil
		}
		return fmt.Errorf("hybrid: close: %w with a round still in flight: %d keys of spend not reported",
			ctx.Err(), l.reconciler.Unreported())
	}
	if l.reconciler == nil {
		return nil
	}
	return l.reconciler.Flush(ctx)
}

// Stats is a snapshot of the limiter's counters, for metrics.
type Stats struct {
	Mode          Mode
	Degraded      bool
	Breaker       breaker.State
	BreakerCounts breaker.Counts
	Reconcile     round.Stats
	Keys          int // keys held in memory
	ClockOffset   time.Duration
	// StateLost counts decisions and reports that found a key's state gone
	// from Redis (evicted, deleted, a Redis restarted empty) while this node
	// knew it had spent: each was restored from what the node knew.
	StateLost uint64
	// HeavyRefused counts requests refused while degraded (or on a key
	// Redis refuses) for weighing more than this node's share of their
	// limit: every node deciding alone could admit one at once.
	HeavyRefused uint64
	// AskTimeouts counts requests refused in Async mode because AskWait
	// ended before the fleet made room for them (Redis slow to answer, a
	// node slow to give back what it did not need): the fleet may have had
	// the room. Raise AskWait if it grows.
	AskTimeouts uint64
	// EvictionsForgotten counts keys evicted before they were fresh whose
	// record was lost because more such keys were evicted within their
	// refill time than MaxKeys: each may come back fresher than it was.
	EvictionsForgotten uint64
	// Evictions counts keys evicted, least recently used first, to hold
	// MaxKeys.
	Evictions uint64
	// Faults counts the faults that changed decisions without stopping
	// Redis (an evicting policy, a key of another type, a clock step).
	Faults Faults
	// DecisionCalls counts the decision path's calls to Redis (Sync mode) by
	// the breaker state that let each through: what shows, whatever the
	// machine's load, that no decision waits on Redis while the breaker is
	// open.
	DecisionCalls DecisionCalls
}

// Stats returns the limiter's counters. It takes each shard's lock once to
// count keys: call it from a metrics scrape, not per request.
func (l *Limiter) Stats() Stats {
	s := Stats{Mode: l.mode, Degraded: l.engine.Degraded(), Keys: l.engine.Len(), ClockOffset: l.offset.Applied()}
	f := &l.faults
	s.Faults = Faults{EvictingPolicy: f.evicting.Load(), UncheckedPolicy: f.unchecked.Load(), KeyFaults: f.keyFaults.Load(), ClockSteps: l.offset.Steps(),
		Evictions: f.evictions.Load()}
	s.DecisionCalls = DecisionCalls{Closed: f.calls[breaker.Closed].Load(), Probes: f.calls[breaker.HalfOpen].Load(), Open: f.calls[breaker.Open].Load()}
	if l.breaker != nil {
		s.Breaker, s.BreakerCounts = l.breaker.State(), l.breaker.Counts()
	}
	s.StateLost = l.lost.Load()
	s.HeavyRefused = l.engine.HeavyRefused()
	s.AskTimeouts = l.askLate.Load()
	s.EvictionsForgotten = l.engine.EvictionsForgotten()
	s.Evictions = l.engine.Evictions()
	if l.reconciler != nil {
		s.Reconcile = l.reconciler.Stats()
		s.StateLost += s.Reconcile.StateLost
	}
	return s
}
