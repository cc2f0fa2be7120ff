package contender

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	sethvargo "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// AsyncInterval is the reconciliation interval of our Async contender.
const AsyncInterval = 10 * time.Millisecond

// ThrottledMemKeys bounds throttled's memstore (an LRU), as ours is bounded
// by its default MaxKeys of 1,048,576.
const ThrottledMemKeys = 1 << 20

// All returns the contenders, ours first.
func All() []Contender {
	return []Contender{
		{
			Name: "hybridlimit LocalOnly", Module: mod("github.com/hybridlimit/hybridlimit"),
			Algorithm: "token bucket (GCRA)", Consistency: "none",
			Config: func(p Policy) string {
				return fmt.Sprintf("hybrid.Config{Mode: LocalOnly}, PerSecond(%d).WithBurst(%d)", p.Rate, p.Burst)
			},
			New: func(env Env, p Policy) (Limiter, error) { return newHybrid(env, p, hybrid.LocalOnly, 0) },
		},
		{
			Name: "hybridlimit Sync", Module: mod("github.com/hybridlimit/hybridlimit"),
			Algorithm: "token bucket (GCRA) in a Lua script", Distributed: true, Consistency: "strong",
			Config: func(p Policy) string {
				return fmt.Sprintf("hybrid.Config{Mode: Sync} (defaults: heartbeat every 20ms, RedisTimeout 50ms), PerSecond(%d).WithBurst(%d)", p.Rate, p.Burst)
			},
			Note: "a decision Redis does not answer within RedisTimeout (50 ms) is made in memory (Source Degraded); the harness counts and reports those",
			New:  func(env Env, p Policy) (Limiter, error) { return newHybrid(env, p, hybrid.Sync, 0) },
		},
		{
			Name: "hybridlimit Sync, ContextTimeoutEnabled", Module: mod("github.com/hybridlimit/hybridlimit"),
			Algorithm: "token bucket (GCRA) in a Lua script", Distributed: true, Consistency: "strong",
			Config: func(p Policy) string {
				return fmt.Sprintf("as hybridlimit Sync, its client with redis.Options{ContextTimeoutEnabled: true}, PerSecond(%d).WithBurst(%d)", p.Rate, p.Burst)
			},
			Note: "an extra row, not a peer setting: with ContextTimeoutEnabled the breaker runs each Redis call on the caller's goroutine (breaker.Settings.Inline); with go-redis's default it hands each call to a new goroutine, so it can stop waiting at RedisTimeout",
			New: func(env Env, p Policy) (Limiter, error) {
				env.ContextTimeout = true
				return newHybrid(env, p, hybrid.Sync, 0)
			},
		},
		HybridAsync(AsyncInterval),
		{
			Name: "x/time/rate map+RWMutex", Module: mod("golang.org/x/time"),
			Algorithm: "token bucket", Consistency: "none",
			Config: func(p Policy) string {
				return fmt.Sprintf("map[string]*rate.Limiter behind sync.RWMutex, rate.NewLimiter(%d, %d) per key", p.Rate, p.Burst)
			},
			Note: "local only; the map is never pruned (as commonly written)",
			New: func(_ Env, p Policy) (Limiter, error) {
				return &rateMap{m: map[string]*rate.Limiter{}, r: rate.Limit(p.Rate), b: int(p.Burst)}, nil
			},
		},
		{
			Name: "x/time/rate single limiter", Module: mod("golang.org/x/time"),
			Algorithm: "token bucket", Consistency: "none",
			Config: func(p Policy) string { return fmt.Sprintf("one rate.NewLimiter(%d, %d), key ignored", p.Rate, p.Burst) },
			Note:   "one limiter for all keys: the floor of what a decision can cost",
			New: func(_ Env, p Policy) (Limiter, error) {
				return rateSingle{rate.NewLimiter(rate.Limit(p.Rate), int(p.Burst))}, nil
			},
		},
		{
			Name: "go-redis/redis_rate", Module: mod("github.com/go-redis/redis_rate/v10"),
			Algorithm: "GCRA in a Lua script (float seconds)", Distributed: true, Consistency: "strong",
			Config: func(p Policy) string {
				return fmt.Sprintf("redis_rate.Limit{Rate: %d, Burst: %d, Period: time.Second}", p.Rate, p.Burst)
			},
			Note: `its key prefix is fixed ("rate:"); the harness namespaces the keys instead`,
			New: func(env Env, p Policy) (Limiter, error) {
				c := env.NewClient()
				return &redisRate{c: c, l: redis_rate.NewLimiter(c), lim: redis_rate.Limit{Rate: int(p.Rate), Burst: int(p.Burst), Period: time.Second}, prefix: env.Prefix}, nil
			},
		},
		{
			Name: "ulule/limiter memory", Module: mod("github.com/ulule/limiter/v3"),
			Algorithm: "fixed window", FixedWindow: true, Consistency: "none",
			Config: func(p Policy) string {
				return fmt.Sprintf("limiter.Rate{Limit: %d, Period: %v}, memory store", p.Burst, p.Window())
			},
			Note: "fixed window, no burst setting: configured as Burst per Burst/Rate (same rate, same largest instant burst); up to 2x Burst can pass across a window boundary",
			New: func(_ Env, p Policy) (Limiter, error) {
				return &ululeLim{l: ulule.New(ulmemory.NewStore(), ulule.Rate{Limit: p.Burst, Period: p.Window()})}, nil
			},
		},
		{
			Name: "ulule/limiter redis", Module: mod("github.com/ulule/limiter/v3"),
			Algorithm: "fixed window (INCRBY+PEXPIRE script)", FixedWindow: true, Distributed: true, Consistency: "strong",
			Config: func(p Policy) string {
				return fmt.Sprintf("limiter.Rate{Limit: %d, Period: %v}, redis store (go-redis v9)", p.Burst, p.Window())
			},
			Note: "fixed window, as the memory store; its redis driver takes github.com/redis/go-redis/v9 directly",
			New: func(env Env, p Policy) (Limiter, error) {
				c := env.NewClient()
				st, err := ulredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: env.Prefix + "ulule"})
				if err != nil {
					c.Close()
					return nil, err
				}
				return &ululeLim{l: ulule.New(st, ulule.Rate{Limit: p.Burst, Period: p.Window()}), c: c}, nil
			},
		},
		{
			Name: "sethvargo/go-limiter", Module: mod("github.com/sethvargo/go-limiter"),
			Algorithm: "fixed window (refills fully at each interval tick)", FixedWindow: true, Consistency: "none",
			Config: func(p Policy) string {
				return fmt.Sprintf("memorystore.Config{Tokens: %d, Interval: %v}", p.Burst, p.Window())
			},
			Note: "documented as a token bucket, but a new interval tick refills the bucket to Tokens at once, so it behaves as a fixed window aligned to the key's first request: configured as Burst per Burst/Rate, like ulule",
			New: func(_ Env, p Policy) (Limiter, error) {
				st, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.Burst), Interval: p.Window()})
				if err != nil {
					return nil, err
				}
				return sethLim{st}, nil
			},
		},
		{
			Name: "throttled GCRA memstore", Module: mod("github.com/throttled/throttled/v2"),
			Algorithm: "GCRA", Consistency: "none",
			Config: func(p Policy) string {
				return fmt.Sprintf("RateQuota{MaxRate: PerSec(%d), MaxBurst: %d} (its burst counts beyond the first request), memstore.NewCtx(%d)", p.Rate, p.Burst-1, ThrottledMemKeys)
			},
			New: func(_ Env, p Policy) (Limiter, error) {
				st, err := memstore.NewCtx(ThrottledMemKeys)
				if err != nil {
					return nil, err
				}
				return newThrottled(st, p, nil)
			},
		},
		{
			Name: "throttled GCRA goredisstore", Module: mod("github.com/throttled/throttled/v2"),
			Algorithm: "GCRA, client-side compare-and-swap (TIME+GET pipeline, then SETNX+EXPIRE or an EVAL CAS)", Distributed: true, Consistency: "strong",
			Config: func(p Policy) string {
				return fmt.Sprintf("RateQuota{MaxRate: PerSec(%d), MaxBurst: %d}, store/goredisstore.v9 (go-redis v9)", p.Rate, p.Burst-1)
			},
			Note: "a CAS lost to another node is retried, up to 10 times by default, then returned as an error (counted as a denial and reported)",
			New: func(env Env, p Policy) (Limiter, error) {
				c := env.NewClient()
				st, err := goredisstore.NewCtx(c, env.Prefix+"throttled:")
				if err != nil {
					c.Close()
					return nil, err
				}
				return newThrottled(st, p, c)
			},
		},
	}
}

// HybridAsync is our Async contender reconciling every interval.
func HybridAsync(interval time.Duration) Contender {
	return Contender{
		Name: "hybridlimit Async " + interval.String(), Module: mod("github.com/hybridlimit/hybridlimit"),
		Algorithm: fmt.Sprintf("token bucket (GCRA), local shares reconciled every %v", interval), Distributed: true, Consistency: "eventual",
		Interval: interval,
		Config: func(p Policy) string {
			return fmt.Sprintf("hybrid.Config{Mode: Async, SyncInterval: %v}, PerSecond(%d).WithBurst(%d)", interval, p.Rate, p.Burst)
		},
		New: func(env Env, p Policy) (Limiter, error) { return newHybrid(env, p, hybrid.Async, interval) },
	}
}

// mod returns path@version of a module linked into this binary.
func mod(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return path
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return path + " (local ../)"
			}
			return path + "@" + d.Version
		}
	}
	if bi.Main.Path == path {
		return path
	}
	return path + " (local ../)"
}

// --- hybridlimit

type hybridLim struct {
	l        *hybrid.Limiter
	c        *redis.Client
	lim      hybrid.Limit
	degraded atomic.Int64
}

func newHybrid(env Env, p Policy, mode hybrid.Mode, interval time.Duration) (Limiter, error) {
	cfg := hybrid.Config{Mode: mode, Prefix: env.Prefix + "hl:", SyncInterval: interval, RedisTimeout: env.RedisTimeout, AskWait: env.AskWait}
	var c *redis.Client
	if mode != hybrid.LocalOnly {
		c = env.NewClient()
		cfg.Redis = c
	}
	l, err := hybrid.New(cfg)
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, err
	}
	return &hybridLim{l: l, c: c, lim: hybrid.PerSecond(p.Rate).WithBurst(p.Burst)}, nil
}

func (h *hybridLim) Allow(ctx context.Context, key string) (bool, error) {
	d, err := h.l.AllowN(ctx, key, h.lim, 1)
	if d.Source == hybrid.Degraded {
		h.degraded.Add(1)
	}
	return d.Allowed, err
}

func (h *hybridLim) Degraded() int64 { return h.degraded.Load() }

// Decide is Allow with the whole decision (its Source), for the many-keys
// workloads; Allow stays as the peers' calls are, for the timed benchmarks.
func (h *hybridLim) Decide(ctx context.Context, key string) (hybrid.Decision, error) {
	d, err := h.l.AllowN(ctx, key, h.lim, 1)
	if d.Source == hybrid.Degraded {
		h.degraded.Add(1)
	}
	return d, err
}

func (h *hybridLim) Stats() hybrid.Stats { return h.l.Stats() }

func (h *hybridLim) Close() error {
	// Closing reports what the node spent and had not reported: with many
	// keys, the spend of every key it decided alone.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := h.l.Close(ctx)
	if h.c != nil {
		err = errors.Join(err, h.c.Close())
	}
	return err
}

// --- x/time/rate

// rateMap is the per-key pattern as users write it: a map of limiters
// behind a RWMutex, the read lock for the common case.
type rateMap struct {
	mu sync.RWMutex
	m  map[string]*rate.Limiter
	r  rate.Limit
	b  int
}

func (x *rateMap) Allow(_ context.Context, key string) (bool, error) {
	x.mu.RLock()
	l, ok := x.m[key]
	x.mu.RUnlock()
	if !ok {
		x.mu.Lock()
		if l, ok = x.m[key]; !ok {
			l = rate.NewLimiter(x.r, x.b)
			x.m[key] = l
		}
		x.mu.Unlock()
	}
	return l.Allow(), nil
}

func (x *rateMap) Close() error { return nil }

type rateSingle struct{ l *rate.Limiter }

func (x rateSingle) Allow(context.Context, string) (bool, error) { return x.l.Allow(), nil }
func (x rateSingle) Close() error                                { return nil }

// --- go-redis/redis_rate

type redisRate struct {
	c      *redis.Client
	l      *redis_rate.Limiter
	lim    redis_rate.Limit
	prefix string
}

func (x *redisRate) Allow(ctx context.Context, key string) (bool, error) {
	res, err := x.l.Allow(ctx, x.prefix+key, x.lim)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

func (x *redisRate) Close() error { return x.c.Close() }

// --- ulule/limiter

type ululeLim struct {
	l *ulule.Limiter
	c *redis.Client
}

func (x *ululeLim) Allow(ctx context.Context, key string) (bool, error) {
	res, err := x.l.Get(ctx, key)
	if err != nil {
		return false, err
	}
	return !res.Reached, nil
}

func (x *ululeLim) Close() error {
	if x.c != nil {
		return x.c.Close()
	}
	return nil
}

// --- sethvargo/go-limiter

type sethLim struct{ st sethvargo.Store }

func (x sethLim) Allow(ctx context.Context, key string) (bool, error) {
	_, _, _, ok, err := x.st.Take(ctx, key)
	return ok, err
}

func (x sethLim) Close() error { return x.st.Close(context.Background()) }

// --- throttled

type throttledLim struct {
	l *throttled.GCRARateLimiterCtx
	c *redis.Client
}

func newThrottled(st throttled.GCRAStoreCtx, p Policy, c *redis.Client) (Limiter, error) {
	l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(int(p.Rate)), MaxBurst: int(p.Burst - 1)})
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, err
	}
	return &throttledLim{l: l, c: c}, nil
}

func (x *throttledLim) Allow(ctx context.Context, key string) (bool, error) {
	limited, _, err := x.l.RateLimitCtx(ctx, key, 1)
	if err != nil {
		return false, err
	}
	return !limited, nil
}

func (x *throttledLim) Close() error {
	if x.c != nil {
		return x.c.Close()
	}
	return nil
}
