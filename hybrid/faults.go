package hybrid

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/remote"
)

// Faults counts the faults that change decisions without stopping Redis:
// each was logged through Config.Logger when it happened.
type Faults struct {
	// EvictingPolicy is 1 when Redis's maxmemory-policy, read at start, can
	// evict the limiter's keys (anything but noeviction), and
	// UncheckedPolicy 1 when it could not be read (see docs/redis.md).
	EvictingPolicy, UncheckedPolicy uint64
	// KeyFaults counts Sync decisions and reservations on a key whose Redis
	// value is of another type (someone else's data under the prefix): each
	// was decided under the Fallback. Each such key is logged once.
	KeyFaults uint64
	// ClockSteps counts steps of this node's clock against Redis TIME,
	// either one, in either direction, each recognised at the round after
	// it and corrected at once.
	ClockSteps uint64
	// Evictions counts the keys Redis evicted to stay under maxmemory while
	// the limiter ran: INFO stats' evicted_keys, every master summed, read
	// every Config.EvictionCheck, its increase since start. They are keys of
	// any owner (a Redis shared with other data counts theirs too); any of
	// them may have been the limiter's, whose spend was then forgotten (see
	// docs/redis.md). The first increase is logged.
	Evictions uint64
}

// DecisionCalls counts the calls to Redis the decision path made (Sync mode:
// decisions and reservations), by the breaker state that let each through.
type DecisionCalls struct {
	// Closed: calls while Redis was healthy. Probes: calls let through while
	// the breaker was half-open, each a probe of Redis. Open: calls made while
	// the breaker was open, which the limiter never makes: while it is open no
	// decision waits on Redis.
	Closed, Probes, Open uint64
}

// faultState is what the limiter keeps of faults: counters, and which keys
// it has logged already.
type faultState struct {
	evicting, unchecked, keyFaults atomic.Uint64
	calls                          [3]atomic.Uint64 // by breaker.State
	degradedLogged                 atomic.Bool      // the degraded mode the log last announced
	degradedSince                  atomic.Int64     // Unix ns of the announced start

	// Redis's count of evicted keys: the last read and whether there was
	// one, when it was read (Unix ns on the limiter's clock), whether a read
	// is in flight, whether INFO is denied (then it is never read again),
	// the increase since the first read, and whether it was logged.
	evictedSeen    atomic.Int64
	evictedKnown   atomic.Bool
	evictedAt      atomic.Int64
	evictedReading atomic.Bool
	evictedDenied  atomic.Bool
	evictions      atomic.Uint64
	evictedLogged  atomic.Bool

	mu     sync.Mutex
	logged map[string]struct{} // keys whose fault was logged, up to maxLoggedKeys
	full   bool                // maxLoggedKeys reached and said so
}

// maxLoggedKeys bounds the keys the limiter remembers having logged a fault
// for: beyond it, one more line says so and later keys go unlogged (still
// counted).
const maxLoggedKeys = 1024

// firstFault reports whether key's fault is the first logged, and whether
// the bound on remembered keys was just reached.
func (f *faultState) firstFault(key string) (first, full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.logged[key]; ok {
		return false, false
	}
	if len(f.logged) >= maxLoggedKeys {
		if f.full {
			return false, false
		}
		f.full = true
		return false, true
	}
	if f.logged == nil {
		f.logged = make(map[string]struct{})
	}
	f.logged[key] = struct{}{}
	return true, false
}

// keyFault counts a decision on a key Redis holds a value of another type
// for, and logs the key the first time.
func (l *Limiter) keyFault(key string, err error) {
	l.faults.keyFaults.Add(1)
	switch first, full := l.faults.firstFault(key); {
	case first:
		l.log.Warn("hybrid: redis holds a value of another type for this key: it is decided under the fallback until that value is gone",
			"key", key, "fallback", l.cfg.Fallback.String(), "err", err)
	case full:
		l.log.Warn("hybrid: more keys hold values of another type in redis; no more of them are logged, all are counted",
			"logged", maxLoggedKeys)
	}
}

// countCall counts a decision's call to Redis by the breaker state that let
// it through (ctx is the call's, from breaker.Call). A call the breaker did
// not let through (a context that did not come from it) counts as made while
// open: no decision may reach Redis but through the breaker.
func (l *Limiter) countCall(ctx context.Context) {
	st, ok := breaker.Admitted(ctx)
	if !ok || st < 0 || int(st) >= len(l.faults.calls) {
		st = breaker.Open
	}
	l.faults.calls[st].Add(1)
}

// transition logs one of the breaker's transitions: at Warn going down, at
// Info coming back. It runs outside every lock (breaker.Settings.OnTransition).
func (l *Limiter) transition(tr breaker.Transition) {
	switch tr.To {
	case breaker.Open:
		if tr.From == breaker.HalfOpen {
			l.log.Warn("hybrid: redis breaker open again: the probe failed", "cause", errString(tr.Cause), "probe_in", l.cfg.BreakerOpenFor)
		} else {
			l.log.Warn("hybrid: redis breaker open: no call goes to redis until a probe", "cause", errString(tr.Cause), "probe_in", l.cfg.BreakerOpenFor)
		}
	case breaker.HalfOpen:
		l.log.Info("hybrid: redis breaker half-open: probing redis")
	case breaker.Closed:
		l.log.Info("hybrid: redis breaker closed: redis answers again")
	}
	l.noteDegraded()
}

// noteDegraded logs the start and the end of degraded mode, once each, as
// the engine's state now says.
func (l *Limiter) noteDegraded() {
	on := l.engine.Degraded()
	if !l.faults.degradedLogged.CompareAndSwap(!on, on) {
		return
	}
	now := l.clock.Now()
	if on {
		l.faults.degradedSince.Store(now.UnixNano())
		l.log.Warn("hybrid: degraded mode started: deciding from memory under the fallback", "fallback", l.cfg.Fallback.String(), "fleet", l.fleet())
		return
	}
	l.log.Info("hybrid: degraded mode ended: deciding with redis again", "after", now.Sub(time.Unix(0, l.faults.degradedSince.Load())).Round(time.Millisecond))
}

// clockStep brings the engine onto the timeline a clock step left, before
// the round that saw it seeds anything, and says so. It runs on the
// reconciler's goroutine (clock.Offset.OnStep).
func (l *Limiter) clockStep(s clock.Step) {
	shards := l.engine.Rewind(s.Mapped)
	l.log.Warn("hybrid: clock step: this node's clock and redis TIME moved apart; the limiter follows redis TIME again",
		"by", s.By, "shards_rewound", shards)
}

// checkEviction reads Redis's maxmemory-policy at start, and warns when it
// can evict the limiter's keys or cannot be read; and reads Redis's count of
// evicted keys, which watchEvictions follows from then on.
func (l *Limiter) checkEviction(ctx context.Context) {
	if l.cfg.EvictionCheck >= 0 {
		l.faults.evictedAt.Store(l.clock.Now().UnixNano())
		n, err := l.store.EvictedKeys(ctx)
		l.noteEvictions(n, err)
	}
	policy, err := l.store.MaxmemoryPolicy(ctx)
	switch {
	case errors.Is(err, remote.ErrCannotCheck):
		l.faults.unchecked.Store(1)
		l.log.Warn("hybrid: could not check redis's maxmemory-policy (CONFIG GET and INFO are denied): "+
			"unless it is noeviction, redis may evict the limiter's state and hand out fresh bursts", "err", err)
	case err != nil:
		l.faults.unchecked.Store(1)
		l.log.Warn("hybrid: could not check redis's maxmemory-policy", "err", err)
	case policy == "volatile-ttl":
		l.faults.evicting.Store(1)
		l.log.Warn("hybrid: redis's maxmemory-policy can evict the limiter's keys: an evicted key forgets its spend and hands out a fresh burst; "+
			"volatile-ttl evicts the keys in use first (a key's time to live is its time to refill: a short limit's keys have the shortest); use noeviction",
			"maxmemory_policy", policy)
	case remote.EvictsKeys(policy):
		l.faults.evicting.Store(1)
		l.log.Warn("hybrid: redis's maxmemory-policy can evict the limiter's keys: an evicted key forgets its spend and hands out a fresh burst; use noeviction",
			"maxmemory_policy", policy)
	}
}

// watchEvictions reads Redis's count of evicted keys again once
// Config.EvictionCheck has passed since the last read, on a goroutine of
// its own so that the round it follows is not held up, through the breaker
// and only while it is closed. It runs after every round.
func (l *Limiter) watchEvictions() {
	f := &l.faults
	every := l.cfg.EvictionCheck
	if every < 0 || f.evictedDenied.Load() || l.closed.Load() || !l.breaker.Healthy() {
		return
	}
	now := l.clock.Now().UnixNano()
	if now-f.evictedAt.Load() < int64(every) || !f.evictedReading.CompareAndSwap(false, true) {
		return
	}
	f.evictedAt.Store(now)
	l.done.Add(1) // on the reconciler's goroutine, itself counted: Close's Wait has not returned
	go func() {
		defer l.done.Done()
		defer f.evictedReading.Store(false)
		l.noteEvictions(breaker.Call(context.Background(), l.breaker, 0, l.store.EvictedKeys))
	}()
}

// noteEvictions counts what Redis evicted since the last read, total being
// its count now, and logs the first increase. The first read only sets the
// count to follow; a read INFO is denied for ends the watch (the policy
// check has said it could not check); any other failure waits for the next.
func (l *Limiter) noteEvictions(total int64, err error) {
	f := &l.faults
	switch {
	case errors.Is(err, remote.ErrCannotCheck):
		f.evictedDenied.Store(true)
		return
	case err != nil:
		return
	}
	last := f.evictedSeen.Swap(total)
	if !f.evictedKnown.Swap(true) {
		return
	}
	more := total - last
	if total < last {
		more = total // a master restarted or failed over: its count began again
	}
	if more <= 0 {
		return
	}
	f.evictions.Add(uint64(more))
	if f.evictedLogged.CompareAndSwap(false, true) {
		l.log.Warn("hybrid: redis evicted keys to stay under maxmemory: any of the limiter's keys among them forgot their spend and handed out a fresh burst; "+
			"use maxmemory-policy noeviction and size maxmemory for the limiter (counted in Stats().Faults.Evictions; logged once)",
			"evicted", more)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
