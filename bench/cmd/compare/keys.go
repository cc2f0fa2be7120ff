package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/bench/contender"
	"github.com/hybridlimit/hybridlimit/internal/workload"
)

// The many-keys workload: every Redis-backed contender, as a fleet of
// o.nodes instances, offered o.keysRate decisions per second over o.keys
// keys drawn from a Zipf distribution of skew o.zipf, each key under
// o.keyPolicy; what Redis spends per decision, read from INFO cpu and INFO
// commandstats around the measured part. Per-client limits look like this:
// a few hot clients, a long tail of cold ones.

// keysOptions are the many-keys workload's settings.
type keysOptions struct {
	keys     int // 0: the workload is skipped
	zipf     float64
	rate     float64 // decisions per second, the whole fleet
	policy   contender.Policy
	warmup   time.Duration
	duration time.Duration
	interval time.Duration // our Async contender's SyncInterval
	timeout  time.Duration // our contenders' RedisTimeout
	workers  int           // workers per node (0: workload's default)
}

// keysResult is one contender's many-keys run.
type keysResult struct {
	c        contender.Contender
	tot      workload.Totals
	redis    workload.RedisCost
	close    workload.RedisCost
	degraded int64
}

// CPUPerDecision is Redis CPU over the decisions.
func (k *keysResult) CPUPerDecision() time.Duration {
	return time.Duration(float64(k.redis.CPU) / float64(max(k.tot.Decisions, 1)))
}

// CmdsPerDecision is Redis commands (inside scripts included) over the
// decisions.
func (k *keysResult) CmdsPerDecision() float64 {
	return float64(k.redis.Calls) / float64(max(k.tot.Decisions, 1))
}

// keysContenders are the contenders of the many-keys workload: every one
// that keeps its state in Redis, our Async at the workload's interval.
func keysContenders(o options, cs []contender.Contender) []contender.Contender {
	var out []contender.Contender
	for _, c := range cs {
		if !c.Distributed {
			continue
		}
		if c.Interval != 0 {
			c = contender.HybridAsync(o.many.interval)
		}
		out = append(out, c)
	}
	return out
}

// measureKeys runs the many-keys workload for each contender in turn, on a
// flushed Redis each time.
func measureKeys(ctx context.Context, o options, admin *redis.Client, addr string, cs []contender.Contender) ([]*keysResult, error) {
	keys, err := workload.NewKeySet(o.many.keys, o.many.zipf)
	if err != nil {
		return nil, err
	}
	var out []*keysResult
	for i, c := range keysContenders(o, cs) {
		if err := admin.FlushAll(ctx).Err(); err != nil { // the private server only
			return nil, err
		}
		r, err := measureKeysOne(ctx, o, admin, contender.Env{Addr: addr, Prefix: fmt.Sprintf("k%d:", i), RedisTimeout: o.many.timeout}, c, keys)
		if err != nil {
			return nil, fmt.Errorf("%s: many keys: %w", c.Name, err)
		}
		logf("many keys: %-40s %.0f/s (%d shed) %.1f%% admitted | Redis %.2f µs CPU, %.3f cmds per decision | %d degraded | closing: Redis %v",
			c.Name, rate(r.tot), r.tot.Shed, 100*float64(r.tot.Admitted)/float64(max(r.tot.Decisions, 1)),
			float64(r.CPUPerDecision())/1e3, r.CmdsPerDecision(), r.degraded, r.close.CPU.Round(time.Millisecond))
		out = append(out, r)
	}
	return out, nil
}

// rate is the decisions per second t achieved.
func rate(t workload.Totals) float64 { return float64(t.Decisions) / t.Elapsed.Seconds() }

func measureKeysOne(ctx context.Context, o options, admin *redis.Client, env contender.Env, c contender.Contender, keys *workload.KeySet) (*keysResult, error) {
	nodes := make([]contender.Limiter, 0, o.nodes)
	closed := false
	defer func() {
		if !closed {
			for _, n := range nodes {
				_ = n.Close()
			}
		}
	}()
	allows := make([]workload.AllowFunc, 0, o.nodes)
	for range o.nodes {
		n, err := c.New(env, o.many.policy)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
		allows = append(allows, n.Allow)
	}
	load := workload.Load{Keys: o.many.keys, Zipf: o.many.zipf, Rate: o.many.rate, Workers: o.many.workers, Seed: 1}
	if o.many.warmup > 0 {
		warm := load
		warm.Seed = 2
		workload.Drive(ctx, allows, keys, warm, o.many.warmup)
	}
	deg0 := int64(0)
	for _, n := range nodes {
		deg0 += degraded(n)
	}
	before, err := workload.ReadRedis(ctx, admin)
	if err != nil {
		return nil, err
	}
	tot := workload.Drive(ctx, allows, keys, load, o.many.duration)
	after, err := workload.ReadRedis(ctx, admin)
	if err != nil {
		return nil, err
	}
	r := &keysResult{c: c, tot: tot, redis: after.Sub(before)}
	for _, n := range nodes {
		r.degraded += degraded(n)
	}
	r.degraded -= deg0
	closed = true
	for _, n := range nodes {
		if err := n.Close(); err != nil {
			logf("%s: closing: %v", c.Name, err)
		}
	}
	final, err := workload.ReadRedis(ctx, admin)
	if err != nil {
		return nil, err
	}
	r.close = final.Sub(after)
	if tot.Errors > 0 {
		logf("%s: many keys: %d errors, first: %v", c.Name, tot.Errors, tot.FirstError)
	}
	return r, ctx.Err()
}

// exactShare estimates the share of the decisions an exact limiter admits
// in the many-keys workload: each key is admitted what it is offered, up to
// its limit over the run (rate × duration + burst). Arrivals that bunch up
// are denied by an exact limiter too, so this is an upper estimate.
func exactShare(o keysOptions) float64 {
	z, err := workload.NewZipf(o.keys, o.zipf)
	if err != nil {
		return 0
	}
	secs := o.duration.Seconds()
	cap := float64(o.policy.Rate)*secs + float64(o.policy.Burst)
	admitted := 0.0
	for k := range z.Keys() {
		admitted += min(z.P(k)*o.rate*secs, cap)
	}
	return admitted / (o.rate * secs)
}

// writeKeys writes the many-keys section of the report.
func writeKeys(b *strings.Builder, o options, rs []*keysResult) {
	m := o.many
	z, _ := workload.NewZipf(m.keys, m.zipf)
	over := 0
	if z != nil {
		over = z.Over(m.rate, float64(m.policy.Rate))
	}
	fmt.Fprintf(b, "## Many keys: Redis's work per decision\n\n")
	fmt.Fprintf(b, "%d nodes (separate instances, each with its own Redis client) offered %.0f decisions/s in total for %v (after %v of the same load, not measured), "+
		"each request's key drawn from %d keys with Zipf skew s = %g (the key of rank k asked for in proportion to 1/k^s), every key limited to %s; "+
		"%d keys are offered more than their limit. Every node's requests arrive at the rate and are sent by %d workers a node, so at most that many wait on Redis at once; "+
		"\"shed\" counts requests no worker was free to send (the contender could not keep up). Redis CPU is `used_cpu_user + used_cpu_sys` of `INFO cpu` over the measured part; commands are `INFO commandstats` calls, those Lua scripts run included. "+
		"Redis is flushed before each contender. An exact limiter admits at most about %.1f%% of the decisions (every key admitted what it is offered, up to its limit).\n\n",
		o.nodes, m.rate, m.duration, m.warmup, m.keys, m.zipf, m.policy, over, cmp.Or(m.workers, workload.DefaultWorkers), 100*exactShare(m))
	fmt.Fprintf(b, "| contender | decisions/s (shed) | admitted | latency p50 / p99 | **Redis CPU / decision** | Redis cmds / decision (scripts) | Redis CPU, %% of a core | degraded | closing: Redis CPU |\n")
	fmt.Fprintf(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		d := float64(max(r.tot.Decisions, 1))
		cpu := fmt.Sprintf("**%.2f µs**", float64(r.CPUPerDecision())/1e3)
		if share := float64(r.degraded) / d; share > 0.01 {
			// Decisions made under the fallback cost Redis nothing: the
			// figure is not the contender's cost per decision.
			cpu = fmt.Sprintf("not measured: %.0f%% degraded (%.2f µs)", 100*share, float64(r.CPUPerDecision())/1e3)
		}
		fmt.Fprintf(b, "| %s | %s (%d) | %.1f%% | %s / %s | %s | %.3f (%.3f) | %.1f%% | %d | %v |\n",
			r.c.Name, fmtRate(rate(r.tot)), r.tot.Shed, 100*float64(r.tot.Admitted)/d,
			fmtDur(r.tot.Latency.Quantile(0.5)), fmtDur(r.tot.Latency.Quantile(0.99)),
			cpu, r.CmdsPerDecision(), float64(r.redis.Scripts)/d,
			100*r.redis.CPU.Seconds()/r.tot.Elapsed.Seconds(), r.degraded, r.close.CPU.Round(time.Millisecond))
	}
	fmt.Fprintf(b, "\n- **degraded** counts our decisions made under the fallback because Redis did not answer within `RedisTimeout` (%v here for our contenders, so that a loaded machine does not send decisions to the fallback). "+
		"A decision made under the fallback costs Redis nothing, so where more than 1%% were, the row's Redis CPU per decision is not the contender's and is not given as one: the machine could not carry the load that way.\n", m.timeout)
	fmt.Fprintf(b, "- **closing** is what stopping the nodes cost Redis: our Async nodes give their shares of contested keys back and leave the fleet (and, with `Config.Ledger`, report what they admitted on keys they decided alone); the peers have nothing to report.\n")
	fmt.Fprintf(b, "- Our Async contender reconciles every %v here (`-keys-interval`).\n\n", m.interval)
}
