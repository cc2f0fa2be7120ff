// Package reconcile (in directory sync, whose name would shadow the
// standard library's: import it as reconcile) keeps a node's memory and Redis
// in step, spending Redis's work where the limits are under pressure rather
// than on every key a node touches.
//
// A node decides every key in its share of the key's limit: one over the
// fleet by default, or what Redis granted it under a lease. Most keys (a
// client, an IP, an API key far below its limit) never need Redis at all:
// the node's share decides them, and the node remembers what it spent. A key
// is reported when it matters: when the node's unreported spend on it
// reaches half its share (so what any node has not told the fleet stays
// bounded), when a request was denied or was too heavy for the share (the
// node wants more: such reports back off while they change nothing), when a
// granted share's lease is due for renewal and the key is still in use, and
// for spend of keys evicted from memory. Each round, with jitter, the
// reconciler takes what is due from the local engine, sends it to Redis
// through the circuit breaker in pipelined batches of bounded size, the most
// pressing first and at most Config.MaxReports of them, and seeds each key
// with the global state that came back, in the share granted.
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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/limit"
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
	// maxBackoff bounds how far pressure reports that change nothing back
	// off: one report per 2^maxBackoff rounds at most.
	maxBackoff = 5
	// faultRetryRounds is how many rounds a key Redis refused waits before
	// it is tried again.
	faultRetryRounds = 50
	// maxNamedKeys bounds the keys named in the logs of refused keys, so a
	// flood of bad keys cannot flood the log; beyond it they are counted.
	maxNamedKeys = 1024
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
	// fails (the rest wait for the next round). Zero means 2,000.
	BatchSize int
	// BatchTimeout bounds each batch's call to Redis. Zero means the
	// breaker's timeout, at least 5 intervals and at least 250 ms: a batch
	// carries many keys, a decision one.
	BatchTimeout time.Duration
	// MaxReports is the most keys one round reports, the most pressing
	// first (denied or too-heavy requests, then leases to renew, then spend
	// past its threshold, then spend of evicted keys): however many keys a
	// node holds, the round that carries a key under pressure stays short.
	// Zero means four batches.
	MaxReports int
	// MaxPending bounds the keys the reconciler keeps counters for: keys
	// reported recently, and all whose spend Redis has not acknowledged
	// (while it is unreachable). Zero means 1,048,576. Spend beyond it is
	// dropped, counted in Stats.LostSpend and logged once per round.
	MaxPending int
	// ActiveWindow is Redis's active window (remote.Options.ActiveWindow):
	// an acknowledged key idle for half of it is forgotten, well before
	// Redis forgets this node's totals for it. Zero means 10 s.
	ActiveWindow time.Duration
	// FleetSize is a configured number of nodes (0: none). Shares are
	// divided by the larger of it and the nodes seen in Redis.
	FleetSize int
	// Logger receives lost spend, lost state and refused keys. Nil means
	// slog.Default().
	Logger *slog.Logger
	// OnRound, if set, is called after every round with what happened, on
	// the reconciler's goroutine and outside its locks (metrics hook here).
	OnRound func(RoundInfo)
	// Shares runs the share protocol of Async mode: keys are decided in
	// this node's share of their limit; a key under pressure is claimed and
	// its shares moved through Redis, with the state they carry. Without it
	// (Sync mode) the reconciler reports the spend a node made while
	// degraded. The engine must make spend due only on pressure
	// (local.Config.SpendDue false) with Shares, on spend too without.
	Shares bool
	// EscalationWait bounds how long a request too heavy for this node's
	// share waits for the fleet to give it room (Escalate). Zero means 10
	// intervals.
	EscalationWait time.Duration
	// Ledger, with Shares, keeps every key's ledger in Redis: what the
	// fleet admitted on it, the spend of keys decided alone included
	// (remote.Store.AsyncLedger). Without it only contested keys' reports
	// carry their spend, and a key decided alone costs Redis nothing at
	// all; the engine need not keep evicted keys' spend
	// (local.Config.KeepOrphans).
	Ledger bool
}

// RoundInfo describes one round, for metrics.
type RoundInfo struct {
	Keys     int           // keys reported
	Deferred int           // keys due that waited for a later round (MaxReports)
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

// Reconciler runs reconciliation rounds. Run it on one goroutine; Round,
// Flush and Escalate may be called from others (rounds never overlap).
type Reconciler struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	starting atomic.Bool // the first round: no batch timeout (Start)
	roundMu  roundLock   // one round at a time (given up on when a caller's context ends); guards the round's buffers

	mu       sync.Mutex // counters and the fields below; never held across a call to Redis
	counters *counters
	peak     int
	rounds   int
	named    map[string]struct{} // refused keys already logged by name
	leases   map[keyLim]*lease   // shares Redis granted, until they lapse
	picks    []pick

	taken   []local.Spend
	reports []remote.Report
	sent    []sentReport
	round   *remote.Round
	dropped uint64 // the engine's dropped spend last seen

	seq atomic.Int64 // sequence numbers of sync decisions

	// The share protocol (Async mode).
	parts        map[keyLim]*part
	contested    map[keyLim]*part // the parts of contested keys, for the lease checks
	cmu          sync.RWMutex     // claims, taken last
	claims       map[keyLim]known
	outbox       []remote.Claim // claims for the next heartbeat
	from, mark   int64          // the claims fetched, and processed, up to (Redis ns)
	seen         int64          // every claim changed before it has been fetched (Redis ns)
	acked        atomic.Int64   // the fleet's acked time (Redis ns)
	wasDegraded  bool           // the engine was degraded at the last round
	shareReports []remote.ShareReport
	shareSent    []sentShare
	sharePicks   []sharePick
	ledgerOut    []remote.LedgerEntry
	ledgerParts  []ledgerSent

	stats struct {
		rounds, errors, keys, lost, lostState, faults, escalations, deferred, claims, over, resets atomic.Uint64
		pending, nodes, leases                                                                     atomic.Int64
		lastDuration                                                                               atomic.Int64
	}
}

// sentReport is what a report carried, to acknowledge when its answer comes.
type sentReport struct {
	c                     *counter
	total, refilled, hits int64
	taken                 time.Time
	pressure              bool
	grant                 int64
	due, orphan, renew    bool // the reasons the counter had to be reported
}

// New returns a Reconciler of deps.
func New(cfg Config, deps Deps) (*Reconciler, error) {
	if deps.Engine == nil || deps.Store == nil || deps.Breaker == nil || deps.Clock == nil || deps.Offset == nil {
		return nil, errors.New("reconcile: every dependency is required")
	}
	if cfg.Interval < 0 || cfg.BatchTimeout < 0 || cfg.BatchSize < 0 || cfg.MaxPending < 0 || cfg.FleetSize < 0 || cfg.MaxReports < 0 {
		return nil, fmt.Errorf("reconcile: negative interval %v, batch timeout %v, batch size %d, max pending %d, fleet size %d or max reports %d",
			cfg.Interval, cfg.BatchTimeout, cfg.BatchSize, cfg.MaxPending, cfg.FleetSize, cfg.MaxReports)
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
	if cfg.MaxReports == 0 {
		cfg.MaxReports = 4 * cfg.BatchSize
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
	r := &Reconciler{cfg: cfg, deps: deps, log: log, counters: newCounters(cfg.MaxPending), round: new(remote.Round),
		named: make(map[string]struct{}), leases: make(map[keyLim]*lease),
		parts: make(map[keyLim]*part), contested: make(map[keyLim]*part), claims: make(map[keyLim]known), roundMu: newRoundLock()}
	if cfg.EscalationWait <= 0 {
		r.cfg.EscalationWait = 10 * cfg.Interval
	}
	r.seq.Store(time.Now().UnixMicro())
	deps.Engine.SetFleet(cfg.FleetSize, 1)
	if cfg.Shares {
		deps.Engine.SetClaimed(r.isClaimed)
	}
	return r, nil
}

// Interval returns the time between rounds.
func (r *Reconciler) Interval() time.Duration { return r.cfg.Interval }

// Run runs rounds every interval, with jitter, until ctx is done. Leases are
// checked every interval on a goroutine of their own, so a round that takes
// long (a slow Redis) never lets a lapsed share be used.
func (r *Reconciler) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if r.cfg.Shares {
					r.expireShares()
				} else {
					r.expireLeases()
				}
			}
		}
	}()
	defer wg.Wait()
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

// Start runs the node's first round, bounded by ctx alone rather than by
// the batch timeout: a Redis far away at start is slow, not dead. New's
// first contact calls it, within its StartupTimeout.
func (r *Reconciler) Start(ctx context.Context) error {
	r.starting.Store(true)
	defer r.starting.Store(false)
	return r.Round(ctx)
}

// batchTimeout bounds a batch's call: the configured timeout, or during
// Start what is left of ctx's.
func (r *Reconciler) batchTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok && r.starting.Load() {
		return max(time.Until(d), time.Millisecond)
	}
	return r.cfg.BatchTimeout
}

// Round runs one round now: takes the engine's due spend, reports the keys
// that need it, and seeds the keys Redis answered for. It returns why the
// round failed, if it did; the spend it could not send is kept for the next.
func (r *Reconciler) Round(ctx context.Context) error {
	info, err := r.runRound(ctx, false)
	if r.cfg.OnRound != nil {
		r.cfg.OnRound(info)
	}
	return err
}

// runRound runs one round of the reconciler's protocol.
func (r *Reconciler) runRound(ctx context.Context, flush bool) (RoundInfo, error) {
	if r.cfg.Shares {
		return r.shareRound(ctx, flush)
	}
	return r.spendRound(ctx, flush)
}

// takenKeep is the capacity of the taken-spend buffer a round keeps; one
// that grew past it (the backlog of an outage, a flood of evicted keys) is
// let go, so the peak does not stay live.
const takenKeep = 4096

// releaseTaken drops the key strings of the spend taken for the GC, and
// the buffer itself if a large round grew it.
func (r *Reconciler) releaseTaken() {
	clear(r.taken)
	if cap(r.taken) > takenKeep {
		r.taken = nil
	}
}

// now returns the local time and the time on Redis's clock.
func (r *Reconciler) now() (time.Time, int64) {
	t := r.deps.Clock.Now()
	return t, r.deps.Offset.Map(t)
}

// lose counts spend that will never reach Redis, and says so.
func (r *Reconciler) lose(weight int64, why string, args ...any) {
	if weight <= 0 {
		return
	}
	r.stats.lost.Add(uint64(weight))
	r.log.Warn("reconcile: spend lost: "+why, append([]any{"weight", weight, "lost_total", r.stats.lost.Load()}, args...)...)
}

// Flush takes every spend the engine holds, due or not, reports it, and
// tells whether everything this node spent has reached Redis: nil, or why
// not and how much is still unreported. When a round fails and ctx has a
// deadline it tries again (after the breaker's probe delay, at least an
// interval) until the deadline; without one it tries up to three times (a
// batch that timed out on a busy Redis: what went through is acknowledged,
// and another try sends only the rest). It returns by ctx's deadline, also
// while another round is in flight (its outcome then unknown). A node that
// reported everything leaves the fleet: the others divide by one node
// fewer at once.
func (r *Reconciler) Flush(ctx context.Context) error {
	_, bounded := ctx.Deadline()
	var err error
	for attempt := 0; ; attempt++ {
		var info RoundInfo
		info, err = r.runRound(ctx, true)
		if r.cfg.OnRound != nil {
			r.cfg.OnRound(info)
		}
		if err == nil {
			break
		}
		if r.Unreported() == 0 {
			err = nil // nothing to report: the failed round carried only the heartbeat
			break
		}
		if ctx.Err() != nil {
			break
		}
		if !bounded {
			if attempt == 2 || errors.Is(err, breaker.ErrOpen) {
				break
			}
			continue
		}
		wait := max(r.deps.Breaker.ProbeIn(time.Now()), r.cfg.Interval)
		if d, _ := ctx.Deadline(); time.Until(d) < wait {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	if err == nil {
		// Leaving: the others divide by one node fewer at once.
		_, _ = breaker.Call(ctx, r.deps.Breaker, 0, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, r.deps.Store.Beat(ctx, &remote.Heartbeat{Leave: true})
		})
	}
	r.mu.Lock()
	keys, weight := 0, int64(0)
	for _, c := range r.counters.m {
		if c.total > c.acked {
			keys++
			weight += c.total - c.acked
		}
	}
	for _, p := range r.parts {
		if p.total > p.acked {
			keys++
			weight += p.total - p.acked
		}
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("reconcile: flush: %d keys (%d in weight) not reported: %w", keys, weight, err)
	}
	if keys > 0 {
		return fmt.Errorf("reconcile: flush: %d keys (%d in weight) not reported", keys, weight)
	}
	return nil
}

// Unreported returns how many keys hold spend that Redis has not
// acknowledged: those counted in rounds, and those the engine holds that no
// round has taken yet. While a round is in flight it counts what that round
// carries as if it failed, plus what was spent since: an upper bound.
func (r *Reconciler) Unreported() int {
	if !r.roundMu.tryLock() {
		return int(r.stats.pending.Load()) + r.deps.Engine.Untaken()
	}
	defer r.roundMu.unlock()
	r.mu.Lock()
	n := r.counters.unacked()
	for _, p := range r.parts {
		if p.total > p.acked {
			n++
		}
	}
	r.mu.Unlock()
	return n + r.deps.Engine.Untaken()
}

// Stats is a snapshot of the reconciler's counters.
type Stats struct {
	Rounds, RoundErrors uint64        // rounds run, and those that failed
	KeysSent            uint64        // reports sent in successful rounds
	Deferred            uint64        // reports due that waited for a later round
	Escalations         uint64        // requests decided in Redis because the node's share could not
	LostSpend           uint64        // weight dropped: a bound hit, or a key Redis refuses
	StateLost           uint64        // keys Redis had lost state of (evicted, deleted), restored
	Claims              uint64        // keys this node claimed: it needed more than its even split
	KeyFaults           uint64        // reports Redis refused for the key itself (a key of another type)
	Resets              uint64        // keys another node reset, started afresh here
	Leases              int           // keys whose share Redis granted under a live lease
	Pending             int           // keys with spend Redis has not acknowledged, as of a recent round (Async: counted every 10 rounds)
	Nodes               int           // nodes active in the fleet at the last round
	LastRound           time.Duration // the last round's duration
}

// Stats returns the reconciler's counters.
func (r *Reconciler) Stats() Stats {
	return Stats{
		Rounds: r.stats.rounds.Load(), RoundErrors: r.stats.errors.Load(), KeysSent: r.stats.keys.Load(),
		Deferred: r.stats.deferred.Load(), Escalations: r.stats.escalations.Load(),
		LostSpend: r.stats.lost.Load(), StateLost: r.stats.lostState.Load(), KeyFaults: r.stats.faults.Load(),
		Claims: r.stats.claims.Load(), Resets: r.stats.resets.Load(),
		Leases: int(r.stats.leases.Load()), Pending: int(r.stats.pending.Load()), Nodes: int(r.stats.nodes.Load()),
		LastRound: time.Duration(r.stats.lastDuration.Load()),
	}
}

// windowOf is the window of lim that rnow (Unix ns, Redis's clock) falls
// in; zero for the buckets.
func windowOf(lim limit.Limit, rnow int64) int64 {
	if lim.Algorithm.IsBucket() {
		return 0
	}
	return rnow / int64(lim.Period)
}

// sortPicks orders picks most pressing first.
func sortPicks(p []pick) {
	slices.SortFunc(p, func(a, b pick) int {
		if a.prio != b.prio {
			return b.prio - a.prio
		}
		return int(a.c.epoch - b.c.epoch) // a key's older counter first
	})
}
