package hybrid

import (
	"context"
	"errors"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
)

// Peek is shorthand for PeekN(ctx, key, lim, 1).
func (l *Limiter) Peek(ctx context.Context, key string, lim Limit) (Decision, error) {
	return l.PeekN(ctx, key, lim, 1)
}

// PeekN reports what AllowN(ctx, key, lim, n) would answer now (allowed,
// remaining, retry-after, reset-after, and where it would be decided),
// spending nothing and writing nothing to Redis: whatever is peeked, and
// however often, every later decision is the one it would have been. It is
// for diagnostics (`hybridlimit explain`), dashboards and support tools,
// not for deciding: a peek followed by AllowN is two calls, and another
// request may come between them.
//
// What it knows depends on the mode:
//
//   - LocalOnly: everything; the node's memory is the whole state.
//   - Sync: the fleet's exact state, read from Redis on its TIME by one
//     script that writes nothing. If Redis fails or times out (after
//     RedisTimeout, or ctx), or the breaker is open, it answers from this
//     node's memory under the Fallback, as AllowN would (Source Degraded).
//     A peek is not counted by the breaker: it never opens, closes or
//     delays it.
//   - Async: what this node knows, which is its share of the limit and the
//     state in it, not the fleet's: it never asks Redis. When the share
//     admits the request, the answer is AllowN's (Source Local). When it
//     cannot, AllowN would ask the fleet, which may admit the request or
//     refuse it; PeekN answers Allowed false with Source Remote and no
//     RetryAfter, meaning "the fleet would decide", and Remaining is this
//     node's allowance. While degraded it answers as AllowN would, under
//     the Fallback.
//
// Errors are AllowN's: the caller's mistakes and ErrClosed. A key whose
// Redis value is of another type is answered under the Fallback. The
// LocalOnly and Async paths never block and ignore ctx.
func (l *Limiter) PeekN(ctx context.Context, key string, lim Limit, n int64) (Decision, error) {
	d, err := l.peekN(ctx, key, lim, n)
	if err == local.ErrSealed {
		return Decision{}, ErrClosed
	}
	return d, err
}

func (l *Limiter) peekN(ctx context.Context, key string, lim Limit, n int64) (Decision, error) {
	if l.closed.Load() {
		return Decision{}, ErrClosed
	}
	lim = lim.Canonical()
	switch l.mode {
	case LocalOnly:
		res, err := l.engine.PeekN(l.now(), key, lim, n)
		return Decision{Result: res, Source: Local}, err
	case Sync:
		return l.syncPeek(ctx, key, lim, n)
	}
	if err := asyncSupports(&lim); err != nil {
		return Decision{}, err
	}
	if l.engine.Degraded() {
		return l.peekDegraded(key, lim, n)
	}
	res, err := l.engine.PeekN(l.now(), key, lim, n)
	switch err {
	case nil:
		return Decision{Result: res, Source: Local}, nil
	case local.ErrShort:
		res.RetryAfter = 0 // not this node's to say: the fleet would decide
		return Decision{Result: res, Source: Remote}, nil
	case local.ErrFaulted:
		return l.peekDegraded(key, lim, n)
	}
	return Decision{}, err
}

// syncPeek reads the key's state in Redis, or answers from memory where
// AllowN would decide there.
func (l *Limiter) syncPeek(ctx context.Context, key string, lim Limit, n int64) (Decision, error) {
	if l.breaker.State() != breaker.Closed {
		return l.peekDegraded(key, lim, n) // no waiting on Redis, and no probe spent on a peek
	}
	known := remote.Known{Now: l.now()}
	known.Estimate = l.sync.Estimate(key, lim)
	d, err := l.peekCall(ctx, func(ctx context.Context) (remote.Decision, error) {
		return l.store.PeekN(ctx, key, lim, n, known)
	})
	switch {
	case err == nil:
		return Decision{Result: d.Result, Source: Remote}, nil
	case isCallerError(err):
		return Decision{}, err
	}
	return l.peekDegraded(key, lim, n)
}

// peekCall runs a peek on Redis within RedisTimeout and ctx, outside the
// breaker: on the caller's goroutine when deadlines reach the client's
// sockets, else on one of its own that is abandoned at the deadline (it
// ends on the client's own timeouts), as the breaker runs calls.
func (l *Limiter) peekCall(ctx context.Context, call func(context.Context) (remote.Decision, error)) (remote.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RedisTimeout)
	defer cancel()
	if deadlinesReachSockets(l.cfg.Redis) {
		return call(ctx)
	}
	type result struct {
		d   remote.Decision
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := call(ctx)
		done <- result{d, err}
	}()
	select {
	case r := <-done:
		return r.d, r.err
	case <-ctx.Done():
		return remote.Decision{}, errors.Join(remote.ErrTimeout, ctx.Err())
	}
}

// peekDegraded answers from memory under the fallback, as degraded decides,
// spending nothing.
func (l *Limiter) peekDegraded(key string, lim Limit, n int64) (Decision, error) {
	now := l.now()
	switch l.cfg.Fallback {
	case FailOpen:
		res, err := l.engine.PeekDegraded(now, key, lim, n)
		if err != nil {
			return Decision{}, err
		}
		if !res.Allowed {
			res.Allowed, res.RetryAfter = true, 0
		}
		return Decision{Result: res, Source: Degraded}, nil
	case FailClosed:
		res, err := l.engine.PeekDegraded(now, key, lim, 0)
		if err != nil {
			return Decision{}, err
		}
		res.Allowed = false
		res.RetryAfter = max(l.breaker.ProbeIn(), time.Millisecond)
		return Decision{Result: res, Source: Degraded}, nil
	}
	res, err := l.engine.PeekDegraded(now, key, lim, n)
	return Decision{Result: res, Source: Degraded}, err
}
