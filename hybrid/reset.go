package hybrid

import (
	"context"
	"fmt"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/remote"
)

// Reset forgives key under lim: its state under lim starts afresh (a full
// bucket, an empty window or log), as go-redis/redis_rate's Reset and
// Gubernator's RESET_REMAINING do, so support staff can let a client back
// in. Only lim is reset: the key's other limits are left as they are.
//
//   - LocalOnly: this node forgets the key.
//   - Sync: the key's state in Redis is made fresh, for every node at once
//     (the copies other nodes keep for degraded mode do not bring the old
//     state back), and this node's copy is forgotten.
//   - Async: the share of the key nobody holds is made fresh in Redis,
//     this node starts the key afresh at once, and its next heartbeat, sent
//     at once, tells every other node through Redis's registry of the
//     reset (and its channel, for the nodes listening): each starts the
//     state it holds of the key afresh when it hears, within about an
//     interval, erring on the strict side meanwhile. What a node admitted
//     between the reset and hearing of it is forgiven with the rest. What
//     was admitted stays in the key's ledger.
//
// In a Redis mode, Reset asks Redis first, bounded by ctx, and changes
// nothing in memory when Redis cannot be reached: it returns an error, so
// the caller knows the client was not forgiven. An invalid key or limit is
// an error too.
func (l *Limiter) Reset(ctx context.Context, key string, lim Limit) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if err := limit.CheckKey(key); err != nil {
		return err
	}
	if err := lim.Validate(); err != nil {
		return err
	}
	lim = lim.Canonical()
	switch l.mode {
	case LocalOnly:
		l.engine.Forget(key, lim)
		return nil
	case Sync:
		if _, err := l.resetCall(ctx, key, func(ctx context.Context) (int64, error) {
			_, err := l.store.Reset(ctx, key, lim)
			return 0, err
		}); err != nil {
			return err
		}
		l.engine.Forget(key, lim)
		return nil
	}
	c := lim // a copy to check: the closures below keep lim, which taking its address would move to the heap
	if err := asyncSupports(&c); err != nil {
		return err // nothing of it is in Redis, and the reconciler could never report it
	}
	at, err := l.resetCall(ctx, key, func(ctx context.Context) (int64, error) {
		_, at, err := l.store.ResetShares(ctx, key, lim)
		return at, err
	})
	if err != nil {
		return err
	}
	l.async.Reset(key, lim, at)
	return nil
}

// resetCall runs a reset in Redis through the breaker.
func (l *Limiter) resetCall(ctx context.Context, key string, call func(context.Context) (int64, error)) (int64, error) {
	if l.breaker.State() == breaker.Open {
		return 0, fmt.Errorf("hybrid: reset %q: %w: the breaker is open", key, remote.ErrUnavailable)
	}
	at, err := breaker.Call(ctx, l.breaker, 0, call)
	if err != nil {
		return 0, fmt.Errorf("hybrid: reset %q: %w", key, err)
	}
	return at, nil
}
