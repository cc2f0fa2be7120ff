package main

import (
	"context"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/bench/contender"
	"github.com/hybridlimit/hybridlimit/bench/keyload"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// waitProbe is the context one decision of ours is made under: it notes
// whether the decision watched it for cancellation. A decision made from
// memory never does; one that waits (Async: for the fleet's answer to an
// ask, whatever the decision's Source says after it; Sync: for Redis)
// selects on ctx.Done(), as every call that can block must. Async's
// Stats().Reconcile.Shares.Asks counts the asks, but a request that asks
// again after a Retry counts once more each time, so it cannot say which
// decisions waited. TestWaitProbe holds our limiter to this.
type waitProbe struct {
	context.Context
	watched atomic.Bool // Done may be called on another goroutine (the breaker's)
}

func (p *waitProbe) Done() <-chan struct{} {
	p.watched.Store(true)
	return p.Context.Done()
}

// decideProbed decides key on h under a waitProbe.
func decideProbed(ctx context.Context, h contender.Hybrid, key string) (d hybrid.Decision, waited bool, err error) {
	p := &waitProbe{Context: ctx}
	d, err = h.Decide(p, key)
	return d, p.watched.Load(), err
}

// asNode adapts an instance to the driver: our modes' decisions say where
// they came from and whether they waited; the peers' do not.
func asNode(l contender.Limiter) (keyload.Node, bool) {
	h, ok := l.(contender.Hybrid)
	if !ok {
		return func(ctx context.Context, key string) (keyload.Answer, error) {
			ok, err := l.Allow(ctx, key)
			return keyload.Answer{Allowed: ok}, err
		}, false
	}
	return func(ctx context.Context, key string) (keyload.Answer, error) {
		d, watched, err := decideProbed(ctx, h, key)
		return keyload.Answer{Allowed: d.Allowed, Source: sourceOf(d.Source), Waited: watched || d.Source == hybrid.Remote}, err
	}, true
}

func sourceOf(s hybrid.Source) keyload.Source {
	switch s {
	case hybrid.Local:
		return keyload.Local
	case hybrid.Remote:
		return keyload.Remote
	case hybrid.Degraded:
		return keyload.Degraded
	}
	return keyload.Unknown
}
