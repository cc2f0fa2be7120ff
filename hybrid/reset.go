package hybrid

import (
	"context"
	"fmt"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/remote"
)

// Reset forgives key under lim: its state under lim's algorithm starts
// afresh (a full bucket, an empty window or log), as go-redis/redis_rate's
// Reset and Gubernator's RESET_REMAINING do, so support staff can let a
// client back in. lim's rate and period do not matter, only its algorithm.
//
//   - LocalOnly: this node forgets the key.
//   - Sync: the key's state in Redis is deleted, for every node at once,
//     and so is the copy this node keeps in memory for degraded mode.
//   - Async: the key's state in Redis is deleted, and this node forgets
//     the key, with the spend on it not yet reported. Every other node
//     keeps its own estimate of the key until its next reconciliation
//     round on the key, which reads the fresh state from Redis; a stale
//     estimate only errs on the strict side (docs/accuracy.md, "Reset").
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
	if l.mode != LocalOnly {
		if l.breaker.State() == breaker.Open {
			return fmt.Errorf("hybrid: reset %q: %w: the breaker is open", key, remote.ErrUnavailable)
		}
		_, err := breaker.Call(ctx, l.breaker, 0, func(ctx context.Context) (bool, error) {
			return l.store.Reset(ctx, key, lim)
		})
		if err != nil {
			return fmt.Errorf("hybrid: reset %q: %w", key, err)
		}
	}
	l.engine.Forget(key, lim)
	return nil
}
