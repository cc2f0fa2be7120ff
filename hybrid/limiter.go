// Package hybrid is the public limiter: node memory (package local) for
// decisions in well under a microsecond, Redis (package remote) for the
// fleet's shared state, the reconciler (package reconcile) between them, and
// a circuit breaker (package breaker) that moves the node to conservative
// local limits while Redis is slow or gone, and back when it returns,
// without losing what was spent.
//
// One setting, Config.Mode, chooses the trade-off: Async (the default)
// decides from memory and reconciles every SyncInterval; Sync decides in
// Redis, exactly; LocalOnly never touches Redis. Whatever the mode, Redis
// trouble is never an error of Allow: it is a Decision whose Source is
// Degraded.
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
	reconcile "github.com/hybridlimit/hybridlimit/sync"
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

	// Nil in LocalOnly mode.
	store      *remote.Store
	breaker    *breaker.Breaker
	reconciler *reconcile.Reconciler

	closed atomic.Bool
	stop   context.CancelFunc
	done   sync.WaitGroup

	faults     faultState
	startNodes atomic.Int64 // nodes in the fleet at first contact, until a round says
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
	engine, err := local.New(local.Config{MaxKeys: cfg.MaxKeys, TrackSpend: mode != LocalOnly})
	if err != nil {
		return nil, fmt.Errorf("hybrid: %w", err)
	}
	l := &Limiter{cfg: cfg, mode: mode, clock: cfg.Clock, offset: clock.NewOffset(cfg.Clock.Now()), engine: engine, log: cfg.Logger}
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
	store, err := remote.New(cfg.Redis, remote.Options{Prefix: cfg.Prefix, Node: cfg.Node, ActiveWindow: cfg.ActiveWindow})
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
	l.reconciler, err = reconcile.New(reconcile.Config{
		Interval:     cfg.SyncInterval,
		FleetSize:    cfg.FleetSize,
		ActiveWindow: cfg.ActiveWindow,
		Logger:       cfg.Logger,
		OnRound:      l.afterRound,
	}, reconcile.Deps{Engine: l.engine, Store: store, Breaker: l.breaker, Clock: l.clock, Offset: l.offset})
	if err != nil {
		return fmt.Errorf("hybrid: %w", err)
	}
	// First contact, all of it within StartupTimeout (not the per-call
	// timeouts: a slow Redis at start is not a dead one).
	ctx, cancel := context.WithTimeout(context.Background(), cfg.StartupTimeout)
	defer cancel()
	err = l.firstContact(ctx)
	if err != nil {
		if !cfg.StartDegraded {
			return fmt.Errorf("%w: %w", ErrRedisUnavailable, err)
		}
		l.log.Warn("hybrid: starting degraded: redis unavailable", "err", err, "fleet_size", cfg.FleetSize)
		l.engine.SetDegraded(true)
		l.noteDegraded()
	}
	return nil
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

// heartbeat makes the node's first report, with nothing spent yet: the
// fleet learns of the node, and the node learns the fleet and Redis's clock.
func (l *Limiter) heartbeat(ctx context.Context) error {
	var round remote.Round
	sent := l.clock.Now()
	if err := l.store.Reconcile(ctx, nil, &round); err != nil {
		return err
	}
	l.offset.Observe(sent, time.Unix(0, round.Now), l.clock.Now())
	l.engine.SetFleet(l.cfg.FleetSize, round.Nodes)
	l.startNodes.Store(int64(round.Nodes))
	return nil
}

// afterRound ends degraded mode once a round succeeds with the breaker
// closed. The breaker's own transitions switch degraded mode at once; this
// also ends a start that was degraded before the breaker saw any failure.
func (l *Limiter) afterRound(info reconcile.RoundInfo) {
	if info.Err == nil && l.breaker.Healthy() {
		l.engine.SetDegraded(false)
		l.noteDegraded()
	}
	if l.cfg.OnRound != nil {
		l.cfg.OnRound(info)
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
func (l *Limiter) now() int64 { return l.offset.Map(l.clock.Now()) }

// Now returns the limiter's clock, aligned to Redis server TIME once the
// first round has measured the offset, and never going backwards: what
// X-RateLimit-Reset should count from.
func (l *Limiter) Now() time.Time { return time.Unix(0, l.offset.Now(l.clock.Now())) }

// Allow is shorthand for AllowN(ctx, key, lim, 1).
func (l *Limiter) Allow(ctx context.Context, key string, lim Limit) (Decision, error) {
	return l.AllowN(ctx, key, lim, 1)
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
func (l *Limiter) AllowN(ctx context.Context, key string, lim Limit, n int64) (Decision, error) {
	if l.closed.Load() {
		return Decision{}, ErrClosed
	}
	switch l.mode {
	case LocalOnly:
		res, err := l.engine.AllowN(l.now(), key, lim, n)
		return Decision{Result: res, Source: Local}, err
	case Sync:
		return l.syncAllow(ctx, key, lim, n)
	}
	if lim.Algorithm == limit.SlidingWindowLog {
		return Decision{}, fmt.Errorf("%w: %v cannot run in async mode (its exact log cannot be merged from summaries): use sync or local mode", ErrUnsupported, lim.Algorithm)
	}
	if l.engine.Degraded() {
		return l.degraded(key, lim, n)
	}
	res, err := l.engine.AllowN(l.now(), key, lim, n)
	return Decision{Result: res, Source: Local}, err
}

// syncAllow decides in Redis, or from memory when Redis fails.
func (l *Limiter) syncAllow(ctx context.Context, key string, lim Limit, n int64) (Decision, error) {
	if l.breaker.State() == breaker.Open {
		return l.degraded(key, lim, n) // no waiting on Redis while it is open
	}
	d, err := breaker.Call(ctx, l.breaker, 0, func(ctx context.Context) (remote.Decision, error) {
		l.countCall(ctx)
		return l.store.AllowN(ctx, key, lim, n)
	})
	if err == nil {
		l.keepWarm(key, lim, d)
		return Decision{Result: d.Result, Source: Remote}, nil
	}
	if isCallerError(err) {
		return Decision{}, err
	}
	if remote.IsKeyFault(err) {
		l.keyFault(key, err)
	}
	return l.degraded(key, lim, n)
}

// keepWarm copies a key's global state into memory after a Sync decision,
// so the node starts from it if Redis fails.
func (l *Limiter) keepWarm(key string, lim Limit, d remote.Decision) {
	if lim.Algorithm == limit.SlidingWindowLog {
		return
	}
	share := local.ShareAmong(l.fleet())
	_ = l.engine.Seed(l.now(), key, lim, d.State, share, 0) // validated by the decision
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

// degraded decides from memory under the fallback.
func (l *Limiter) degraded(key string, lim Limit, n int64) (Decision, error) {
	now := l.now()
	switch l.cfg.Fallback {
	case FailOpen:
		res, err := l.engine.AllowN(now, key, lim, n)
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
		res, err := l.engine.AllowN(now, key, lim, 0) // validates, and reports without spending
		if err != nil {
			return Decision{}, err
		}
		res.Allowed = false
		res.RetryAfter = max(l.breaker.ProbeIn(l.clock.Now()), time.Millisecond)
		return Decision{Result: res, Source: Degraded}, nil
	}
	res, err := l.engine.AllowN(now, key, lim, n)
	return Decision{Result: res, Source: Degraded}, err
}

// Reserve places a request of weight n for key in lim's leaky-bucket queue:
// when admitted, the Reservation says how long to wait before proceeding.
// lim must be a leaky bucket (else ErrUnsupported). Degraded decisions
// reserve in memory.
func (l *Limiter) Reserve(ctx context.Context, key string, lim Limit, n int64) (Reservation, error) {
	if l.closed.Load() {
		return Reservation{}, ErrClosed
	}
	if lim.Algorithm != limit.LeakyBucket {
		return Reservation{}, fmt.Errorf("%w: reserve needs the leaky bucket, not %v", ErrUnsupported, lim.Algorithm)
	}
	if l.mode == Sync && l.breaker.State() != breaker.Open {
		d, err := breaker.Call(ctx, l.breaker, 0, func(ctx context.Context) (remote.Decision, error) {
			l.countCall(ctx)
			return l.store.ReserveN(ctx, key, lim, n)
		})
		if err == nil {
			l.keepWarm(key, lim, d)
			return Reservation{Decision: Decision{Result: d.Result, Source: Remote}, Delay: d.Delay}, nil
		}
		if isCallerError(err) {
			return Reservation{}, err
		}
		if remote.IsKeyFault(err) {
			l.keyFault(key, err)
		}
	}
	src := Local
	if l.mode != LocalOnly && l.engine.Degraded() || l.mode == Sync {
		src = Degraded
	}
	r, err := l.engine.ReserveN(l.now(), key, lim, n)
	return Reservation{Decision: Decision{Result: r.Result, Source: src}, Delay: r.Delay}, err
}

// Wait blocks until a request of weight n for key may proceed under lim's
// leaky-bucket queue, or ctx is done. It returns at once, without waiting,
// when the wait would outlast ctx's deadline; a reservation abandoned because
// ctx ended is given back to the queue.
func (l *Limiter) Wait(ctx context.Context, key string, lim Limit, n int64) error {
	for {
		r, err := l.Reserve(ctx, key, lim, n)
		if err != nil {
			return err
		}
		wait := r.Delay
		if !r.Allowed {
			wait = r.RetryAfter
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			if r.Allowed {
				l.cancel(key, lim, n, r.Source)
			}
			return fmt.Errorf("hybrid: waiting %v would exceed the context's deadline: %w", wait, context.DeadlineExceeded)
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				if r.Allowed {
					l.cancel(key, lim, n, r.Source)
				}
				return ctx.Err()
			case <-t.C:
			}
		}
		if r.Allowed {
			return nil
		}
	}
}

// cancel gives back a reservation made in memory. One made in Redis stays
// counted: Redis has no record of which reservation it was.
func (l *Limiter) cancel(key string, lim Limit, n int64, src Source) {
	if src != Remote {
		_ = l.engine.CancelN(l.now(), key, lim, n)
	}
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
	Reconcile     reconcile.Stats
	Keys          int // keys held in memory
	ClockOffset   time.Duration
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
	s.Faults = Faults{EvictingPolicy: f.evicting.Load(), UncheckedPolicy: f.unchecked.Load(), KeyFaults: f.keyFaults.Load(), ClockSteps: l.offset.Steps()}
	s.DecisionCalls = DecisionCalls{Closed: f.calls[breaker.Closed].Load(), Probes: f.calls[breaker.HalfOpen].Load(), Open: f.calls[breaker.Open].Load()}
	if l.breaker != nil {
		s.Breaker, s.BreakerCounts = l.breaker.State(), l.breaker.Counts()
	}
	if l.reconciler != nil {
		s.Reconcile = l.reconciler.Stats()
	}
	return s
}
