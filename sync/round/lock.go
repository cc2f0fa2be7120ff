package round

import "context"

// Lock is a mutex a waiter can give up on when its context ends, so that a
// flush (and so the limiter's Close) returns by its deadline even while a
// round is in flight.
type Lock chan struct{}

// NewLock returns an unlocked Lock.
func NewLock() Lock { return make(Lock, 1) }

// Acquire takes the lock, or returns ctx's error if ctx ends first. A free
// lock is taken even when ctx has ended.
func (l Lock) Acquire(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	default:
	}
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TryAcquire takes the lock if it is free.
func (l Lock) TryAcquire() bool {
	select {
	case l <- struct{}{}:
		return true
	default:
		return false
	}
}

// Release frees the lock.
func (l Lock) Release() { <-l }
