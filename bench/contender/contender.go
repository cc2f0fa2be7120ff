// Package contender adapts each rate limiter of the comparison to one
// interface, configured from one Policy so that every contender enforces
// the same rate and burst. Where a library cannot express the policy
// exactly, Contender.Note says how it was mapped.
package contender

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Policy is the limit every contender enforces: Rate requests per second
// with bursts of up to Burst.
type Policy struct {
	Rate  int64
	Burst int64
}

func (p Policy) String() string { return fmt.Sprintf("%d/s burst %d", p.Rate, p.Burst) }

// Window is the fixed window that gives a fixed-window limiter the same rate
// and the same largest instant burst as p: Burst requests per Burst/Rate.
func (p Policy) Window() time.Duration {
	return time.Duration(p.Burst) * time.Second / time.Duration(p.Rate)
}

// Limiter is one instance of a contender: one node.
type Limiter interface {
	// Allow decides one request for key.
	Allow(ctx context.Context, key string) (bool, error)
	// Close releases the instance (and the Redis client it made, if any).
	Close() error
}

// Degrader is implemented by instances that can decide without their store
// (ours, when Redis is slow or down): Degraded counts such decisions, so the
// harness can report them instead of passing them off as remote ones.
type Degrader interface {
	Degraded() int64
}

// Hybrid is implemented by our instances (hybridlimit's modes): each
// decision with where it came from, and the limiter's counters.
type Hybrid interface {
	Decide(ctx context.Context, key string) (hybrid.Decision, error)
	Stats() hybrid.Stats
}

// Env is what an instance is built from.
type Env struct {
	// Addr is the private Redis server's address.
	Addr string
	// Hooks are added to every Redis client an instance makes.
	Hooks []redis.Hook
	// Prefix namespaces the instance's keys in Redis. Instances with the
	// same Prefix share state: they are nodes of one fleet.
	Prefix string
	// ContextTimeout sets go-redis's ContextTimeoutEnabled on the clients
	// (off by default, as in go-redis).
	ContextTimeout bool
	// RedisTimeout is hybridlimit's hybrid.Config.RedisTimeout (how long a
	// decision or a batch waits on Redis before the breaker counts a
	// failure). Zero means hybridlimit's default, 50 ms. The peers have no
	// such setting.
	RedisTimeout time.Duration
	// AskWait is hybridlimit's hybrid.Config.AskWait (how long, in Async
	// mode, a request beyond the node's share waits for the fleet). Zero
	// means hybridlimit's default (two intervals, at most 100 ms). The
	// peers have no such setting.
	AskWait time.Duration
}

// NewClient returns a new go-redis client for the private server with
// go-redis's default options (the same for every contender; ContextTimeout
// aside) and the hooks.
func (e Env) NewClient() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.Addr, ContextTimeoutEnabled: e.ContextTimeout})
	for _, h := range e.Hooks {
		c.AddHook(h)
	}
	return c
}

// Contender is one limiter of the comparison.
type Contender struct {
	// Name is the row's label.
	Name string
	// Module is the Go module (and version, from the build) it comes from.
	Module string
	// Algorithm is what it runs, as configured here.
	Algorithm string
	// FixedWindow: the library has no burst setting and counts in fixed
	// windows; it is configured as Burst requests per Policy.Window.
	FixedWindow bool
	// Distributed: instances with the same Env.Prefix share one limit
	// through Redis. Local contenders ignore Env (and make no client).
	Distributed bool
	// Consistency across nodes: "strong" (every decision made on the shared
	// state), "eventual" (decided locally, converging through Redis), or
	// "none" (each node on its own).
	Consistency string
	// Config describes, for p, how the library was configured.
	Config func(p Policy) string
	// Note is any difference from the policy that could not be removed.
	Note string
	// New makes one instance (one node).
	New func(env Env, p Policy) (Limiter, error)
	// Interval is the reconciliation interval of a contender that decides
	// in memory and reconciles (our Async); zero for the others.
	Interval time.Duration
}
