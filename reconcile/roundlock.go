package reconcile

import "context"

// roundLock is a mutex a waiter can give up on when its context ends, so
// that Flush (and so the limiter's Close) returns by its deadline even while
// a round is in flight.
type roundLock chan struct{}

func newRoundLock() roundLock { return make(roundLock, 1) }

// lock takes the lock, or returns ctx's error if ctx ends first. A free lock
// is taken even when ctx has ended.
func (l roundLock) lock(ctx context.Context) error {
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

// tryLock takes the lock if it is free.
func (l roundLock) tryLock() bool {
	select {
	case l <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l roundLock) unlock() { <-l }
