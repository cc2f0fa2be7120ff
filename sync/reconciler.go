// Package reconcile (in directory sync, whose name would shadow the
// standard library's: import it as reconcile) keeps a node's memory and Redis
// in step. Every interval, with jitter, it takes what the node spent since
// the last round from the local engine, sends it to Redis through the
// circuit breaker in pipelined batches of bounded size (one batch, usually;
// many after an outage left a backlog), and seeds each key's local state with
// the global state that came back, in this node's share of the limit: its
// demand over the demand of all the key's active nodes.
//
// Reports are idempotent: the node counts, per key, all it spent since the
// counter began, and Redis applies only what it has not applied before. A
// round whose answer never came (a timeout, a paused Redis) may well have
// reached Redis; the next round sends the same totals again and nothing is
// counted twice. The counters are bounded in memory; if the bound is ever
// hit, the weight dropped is counted in Stats.LostSpend and logged, never
// silently.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
)

// Defaults for Config's zero fields.
const (
	DefaultInterval   = 20 * time.Millisecond
	DefaultJitter     = 0.1
	DefaultMaxPending = 1 << 20
	DefaultBatchSize  = 2000
	// sweepEvery is how many rounds pass between sweeps of idle keys.
	sweepEvery = 10
	// sweepPerShard bounds the keys a sweep looks at per shard.
	sweepPerShard = 64
)

// Config configures a Reconciler. The zero value is usable.
type Config struct {
	// Interval is the time between rounds. A zero Interval means 20 ms.
	Interval time.Duration
	// Jitter spreads rounds by up to ±Jitter of the interval, so a fleet
	// started together does not reconcile in lockstep. Zero means 0.1;
	// negative means none.
	Jitter float64
	// BatchSize is the most keys one call to Redis carries. A round sends
	// its keys in batches, one after another, and stops at the first that
	// fails (the rest wait for the next round), so a round of any size (a
	// node's keys after a long outage) makes progress in calls of bounded
	// duration. Zero means 2,000: about 25 ms of Redis's time at the
	// measured 80,000 keys/s.
	BatchSize int
	// BatchTimeout bounds each batch's call to Redis. Zero means the
	// breaker's timeout, at least 5 intervals and at least 250 ms: a batch
	// carries many keys, a decision one.
	BatchTimeout time.Duration
	// MaxPending bounds the keys the reconciler keeps a running total for:
	// the keys spent on recently, and all whose spend Redis has not
	// acknowledged yet (while it is unreachable). Zero means 1,048,576.
	MaxPending int
	// ActiveWindow is Redis's active window (remote.Options.ActiveWindow):
	// an acknowledged key idle for half of it is forgotten, well before
	// Redis forgets this node's totals for it. Zero means 10 s.
	ActiveWindow time.Duration
	// FleetSize is a configured number of nodes (0: none). It takes priority
	// over the nodes seen in Redis when new keys and degraded mode divide the
	// limit.
	FleetSize int
	// Logger receives lost spend and refused keys. Nil means slog.Default().
	Logger *slog.Logger
	// OnRound, if set, is called after every round with what happened, on
	// the reconciler's goroutine and outside its locks (metrics hook here).
	OnRound func(RoundInfo)
}

// RoundInfo describes one round, for metrics.
type RoundInfo struct {
	Keys     int           // keys reported
	Duration time.Duration // the round trip to Redis, or the time to fail
	Err      error         // why the round failed; nil when it succeeded
	Nodes    int           // nodes active in the fleet, as Redis answered
}

// Deps are the parts a Reconciler works with, all shared with the limiter.
type Deps struct {
	Engine  *local.Engine
	Store   *remote.Store
	Breaker *breaker.Breaker
	Clock   clock.Clock
	Offset  *clock.Offset
}

// Reconciler runs reconciliation rounds. Run it on one goroutine; Round and
// Flush may be called from others (rounds never overlap).
type Reconciler struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	mu       roundLock // one round at a time; guards the fields below
	counters *counters
	taken    []local.Spend
	due      []*counter
	reports  []remote.Report // reused while calls return; see runRound
	round    *remote.Round
	rounds   int

	stats struct {
		rounds, errors, keys, lost atomic.Uint64
		pending, nodes             atomic.Int64
		lastDuration               atomic.Int64
	}
}

// New returns a Reconciler of deps.
func New(cfg Config, deps Deps) (*Reconciler, error) {
	if deps.Engine == nil || deps.Store == nil || deps.Breaker == nil || deps.Clock == nil || deps.Offset == nil {
		return nil, errors.New("reconcile: every dependency is required")
	}
	if cfg.Interval < 0 || cfg.BatchTimeout < 0 || cfg.BatchSize < 0 || cfg.MaxPending < 0 || cfg.FleetSize < 0 {
		return nil, fmt.Errorf("reconcile: negative interval %v, batch timeout %v, batch size %d, max pending %d or fleet size %d",
			cfg.Interval, cfg.BatchTimeout, cfg.BatchSize, cfg.MaxPending, cfg.FleetSize)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Jitter == 0 {
		cfg.Jitter = DefaultJitter
	}
	if cfg.Jitter < 0 || cfg.Jitter > 1 {
		cfg.Jitter = 0
	}
	if cfg.BatchTimeout == 0 {
		cfg.BatchTimeout = max(deps.Breaker.Timeout(), 5*cfg.Interval, 250*time.Millisecond)
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.ActiveWindow <= 0 {
		cfg.ActiveWindow = remote.DefaultActiveWindow
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &Reconciler{cfg: cfg, deps: deps, log: log, counters: newCounters(cfg.MaxPending), round: new(remote.Round), mu: newRoundLock()}
	deps.Engine.SetFleet(cfg.FleetSize, 1)
	return r, nil
}

// Interval returns the time between rounds.
func (r *Reconciler) Interval() time.Duration { return r.cfg.Interval }

// Run runs rounds every interval, with jitter, until ctx is done.
func (r *Reconciler) Run(ctx context.Context) {
	timer := time.NewTimer(r.next())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			_ = r.Round(ctx)
			timer.Reset(r.next())
		}
	}
}

// next is the delay before the next round.
func (r *Reconciler) next() time.Duration {
	d := r.cfg.Interval
	if r.cfg.Jitter > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * r.cfg.Jitter * float64(d))
	}
	return max(d, time.Millisecond)
}

// Round runs one round now: takes the engine's spend, sends everything
// pending, and seeds the keys Redis answered for. It returns why the round
// failed, if it did; the spend it could not send is kept for the next.
func (r *Reconciler) Round(ctx context.Context) error {
	info, err := r.runRound(ctx)
	if r.cfg.OnRound != nil {
		r.cfg.OnRound(info)
	}
	return err
}

func (r *Reconciler) runRound(ctx context.Context) (RoundInfo, error) {
	if err := r.mu.lock(ctx); err != nil {
		return RoundInfo{Err: err}, err // a round in flight outlasted ctx
	}
	defer r.mu.unlock()
	if b := r.deps.Breaker; b.State() == breaker.Open && b.ProbeIn(time.Now()) > 0 {
		// Nothing will reach Redis before the breaker's next probe: leave
		// the spend in the engine, where it waits at no cost, until then.
		r.stats.rounds.Add(1)
		r.stats.errors.Add(1)
		return RoundInfo{Err: breaker.ErrOpen}, breaker.ErrOpen
	}
	e := r.deps.Engine
	start := r.deps.Clock.Now()
	r.taken = e.TakeSpend(r.taken[:0])
	lost := int64(0)
	for _, s := range r.taken {
		lost += r.counters.add(s, start)
	}
	clear(r.taken) // drop the key strings for the GC
	if lost > 0 {
		r.lose(lost, "too many keys to keep a count of", "max_pending", r.cfg.MaxPending)
	}
	r.stats.pending.Store(int64(r.counters.unacked())) // what this round carries, should it never return

	clear(r.due)
	r.due = r.counters.due(r.due[:0])
	r.reports = r.reports[:0]
	for _, c := range r.due {
		seconds := max(start.Sub(c.since).Seconds(), r.cfg.Interval.Seconds())
		r.reports = append(r.reports, remote.Report{Key: c.key, Limit: c.lim, Window: c.window, Epoch: c.epoch,
			Total: c.total, Acked: c.acked, Demand: float64(c.hits) / seconds})
	}
	info := RoundInfo{Keys: len(r.reports)}

	// Batch by batch; even a round with nothing to report makes one call,
	// the node's heartbeat.
	var err error
	for from := 0; ; from += r.cfg.BatchSize {
		to := min(from+r.cfg.BatchSize, len(r.reports))
		if err = r.sendBatch(ctx, from, to, start); err != nil || to == len(r.reports) {
			break
		}
	}
	end := r.deps.Clock.Now()
	info.Duration = end.Sub(start)
	r.stats.lastDuration.Store(int64(info.Duration))
	r.stats.rounds.Add(1)
	r.stats.pending.Store(int64(r.counters.unacked()))
	if err != nil {
		r.stats.errors.Add(1)
		info.Err = err
		return info, err
	}
	info.Nodes = int(r.stats.nodes.Load())
	now := r.deps.Offset.Map(end)
	r.counters.forget(end, r.cfg.ActiveWindow/2, now)
	r.stats.pending.Store(int64(r.counters.unacked()))
	if r.rounds++; r.rounds%sweepEvery == 0 {
		e.Sweep(now, sweepPerShard)
	}
	return info, nil
}

// sendBatch sends reports[from:to] (due[from:to]) in one call through the
// breaker, and applies the answers: acknowledged totals, and each key's
// local state seeded with its share of the global state. taken is when the
// round took the spend it reports.
func (r *Reconciler) sendBatch(ctx context.Context, from, to int, taken time.Time) error {
	reports, due, round := r.reports[from:to], r.due[from:to], r.round
	sent := r.deps.Clock.Now()
	_, err := breaker.Call(ctx, r.deps.Breaker, r.cfg.BatchTimeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.deps.Store.Reconcile(ctx, reports, round)
	})
	if err != nil && !errors.Is(err, breaker.ErrOpen) && !errors.Is(err, breaker.ErrBusy) {
		// The breaker may have stopped waiting (a timeout, the caller's
		// context) while the call still runs and reads these buffers: they
		// are the call's now; the next round gets new ones. Whether it
		// reached Redis or not, the next round reports the same totals.
		r.reports, r.round = nil, new(remote.Round)
	}
	if err != nil {
		return err
	}

	received := r.deps.Clock.Now()
	r.deps.Offset.Observe(sent, time.Unix(0, round.Now), received)
	e := r.deps.Engine
	e.SetFleet(r.cfg.FleetSize, round.Nodes)
	r.stats.nodes.Store(int64(round.Nodes))
	now := r.deps.Offset.Map(received)
	for i, a := range round.Answers {
		c, rep := due[i], reports[i]
		if a.Err != nil {
			if remote.IsKeyFault(a.Err) || !errors.As(a.Err, new(*remote.Error)) {
				// Redis refuses this key for good (someone else's value, a
				// limit it cannot take): keeping it would only grow.
				r.lose(r.counters.drop(c), "redis refused the key", "key", rep.Key, "err", a.Err)
			}
			continue // kept: the next round reports the same total again
		}
		r.counters.ack(c, rep.Total, c.hits, taken) // counters change only in rounds: c still holds what was sent
		share := Share(a.Demand, a.Total, a.Nodes)
		_ = e.Seed(now, rep.Key, rep.Limit, a.State, share, a.Nodes) // validated when it was decided
	}
	r.stats.keys.Add(uint64(len(reports)))
	return nil
}

// lose counts spend that will never reach Redis, and says so.
func (r *Reconciler) lose(weight int64, why string, args ...any) {
	if weight <= 0 {
		return
	}
	r.stats.lost.Add(uint64(weight))
	r.log.Warn("reconcile: spend lost: "+why, append([]any{"weight", weight}, args...)...)
}

// Flush runs a round now and reports whether everything this node spent has
// reached Redis: nil, or the last round's error and how many keys' spend is
// not reported. When a round fails and ctx has a deadline it tries again
// (after the breaker's probe delay, at least an interval) until the
// deadline; without one it tries once. It returns by ctx's deadline, also
// while another round is in flight (its outcome then unknown).
func (r *Reconciler) Flush(ctx context.Context) error {
	_, retry := ctx.Deadline()
	for {
		err := r.Round(ctx)
		if err == nil {
			break
		}
		n := r.Unreported()
		if n == 0 {
			return nil // nothing to report: the failed round carried only the heartbeat
		}
		wait := max(r.deps.Breaker.ProbeIn(time.Now()), r.cfg.Interval)
		if d, ok := ctx.Deadline(); !retry || !ok || time.Until(d) < wait {
			return fmt.Errorf("reconcile: flush: %d keys of spend not reported: %w", n, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("reconcile: flush: %d keys of spend not reported: %w", n, err)
		case <-t.C:
		}
	}
	if n := r.stats.pending.Load(); n > 0 {
		return fmt.Errorf("reconcile: flush: %d keys of spend not reported", n)
	}
	return nil
}

// Unreported returns how many keys hold spend that Redis has not
// acknowledged: those counted in rounds, and those the engine holds that no
// round has taken yet (taken now, so they are counted once, when no round is
// in flight). While a round is in flight it counts what that round carries
// as if it failed, plus what was spent since: an upper bound.
func (r *Reconciler) Unreported() int {
	if !r.mu.tryLock() {
		return int(r.stats.pending.Load()) + r.deps.Engine.Untaken()
	}
	defer r.mu.unlock()
	now := r.deps.Clock.Now()
	r.taken = r.deps.Engine.TakeSpend(r.taken[:0])
	lost := int64(0)
	for _, s := range r.taken {
		lost += r.counters.add(s, now)
	}
	clear(r.taken)
	if lost > 0 {
		r.lose(lost, "too many keys to keep a count of", "max_pending", r.cfg.MaxPending)
	}
	n := r.counters.unacked()
	r.stats.pending.Store(int64(n))
	return n
}

// Stats is a snapshot of the reconciler's counters.
type Stats struct {
	Rounds, RoundErrors uint64        // rounds run, and those that failed
	KeysSent            uint64        // reports sent in successful rounds
	LostSpend           uint64        // weight dropped: buffer full, or a key Redis refuses
	Pending             int           // keys with spend Redis has not acknowledged, as of the last round that took spend
	Nodes               int           // nodes active in the fleet at the last round
	LastRound           time.Duration // the last round's duration
}

// Stats returns the reconciler's counters.
func (r *Reconciler) Stats() Stats {
	return Stats{
		Rounds: r.stats.rounds.Load(), RoundErrors: r.stats.errors.Load(), KeysSent: r.stats.keys.Load(),
		LostSpend: r.stats.lost.Load(), Pending: int(r.stats.pending.Load()), Nodes: int(r.stats.nodes.Load()),
		LastRound: time.Duration(r.stats.lastDuration.Load()),
	}
}
