// Package reports is Sync mode's reconciler (Reporter): it reports to Redis
// the spend a node made in memory while Redis could not decide (degraded,
// or a decision whose call timed out), so that Redis's exact state counts
// it, in rounds (package round) through the circuit breaker.
//
// The reports are idempotent: the node counts, per key, all it spent
// since the counter began, and Redis applies only what it has not applied
// before. A round whose answer never came (a timeout, a paused Redis) may
// well have reached Redis; the next round sends the same totals again and
// nothing is counted twice. The counters are bounded in memory; if the
// bound is ever hit, the weight dropped is counted in Stats.LostSpend and
// logged, never silently.
package reports

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/sync/round"
)

// Defaults for Config's zero fields.
const (
	// DefaultMaxPendingBytes bounds the memory of Sync's pending spend.
	DefaultMaxPendingBytes = 64 << 20
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

// Config configures a Sync. The zero value is usable.
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
	// MaxPendingBytes bounds the memory those counters take, as the
	// reconciler estimates it (about 400 bytes a key and its length): what
	// spend waiting for Redis through an outage may hold. Zero means 64 MiB
	// (some 160,000 keys); negative means no bound but MaxPending. Spend of
	// a new key beyond it is dropped, counted in Stats.LostSpend and
	// Stats.PendingDropped, and logged once.
	MaxPendingBytes int64
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
	OnRound func(round.Info)
}

// Deps are the parts a reconciler works with, all shared with the limiter.
type Deps struct {
	Engine  *local.Engine
	Store   *remote.Store
	Breaker *breaker.Breaker
	Clock   clock.Clock
	Offset  *clock.Offset
}

// keyLim names a key's state: one per (key, limit).
type keyLim struct {
	key string
	lim limit.Limit
}

// Reporter reconciles a Sync-mode node: the spend it made in memory while
// Redis could not decide (degraded, or a decision whose call timed out)
// reported to Redis's exact state, and the share of each key Redis grants
// it for deciding alone under a lease. Run it on one goroutine; Round, Flush,
// Begin, Settle and Uncertain may be called from others (rounds never
// overlap).
type Reporter struct {
	round.Runner
	cfg   Config
	deps  Deps
	log   *slog.Logger
	zones limit.Zones // calendar limits' time zones, for windowOf

	mu       sync.Mutex // counters and the fields below; never held across a call to Redis
	counters *counters
	peak     int
	n        int                 // rounds run
	named    map[string]struct{} // refused keys already logged by name
	leases   map[keyLim]*lease   // shares Redis granted, until they lapse
	picks    []pick

	taken      []local.Spend
	unsure     []spendKey // keys with timed-out decisions noted since the last round
	lostUnsure int64      // their spend dropped for want of room, for the round to count
	reports    []remote.Report
	sent       []sentReport
	round      *remote.Round
	dropped    uint64 // the engine's dropped spend last seen

	seqs seqs // sequence numbers of sync decisions, and the node's low mark

	stats struct {
		keys, lost, lostState, faults, deferred atomic.Uint64
		pendingDropped, pendingBytes            atomic.Uint64
		pending, leases                         atomic.Int64
	}
	bytesLogged  bool        // the bound on bytes was logged; r.mu
	fleetLogged  atomic.Bool // a fault of the fleet's keys was logged
	forcedLogged atomic.Bool // a timed-out decision settled unanswered was logged
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

// New returns a Sync of deps.
func New(cfg Config, deps Deps) (*Reporter, error) {
	if deps.Engine == nil || deps.Store == nil || deps.Breaker == nil || deps.Clock == nil || deps.Offset == nil {
		return nil, errors.New("reports: every dependency is required")
	}
	if cfg.Interval < 0 || cfg.BatchTimeout < 0 || cfg.BatchSize < 0 || cfg.MaxPending < 0 || cfg.FleetSize < 0 || cfg.MaxReports < 0 {
		return nil, fmt.Errorf("reports: negative interval %v, batch timeout %v, batch size %d, max pending %d, fleet size %d or max reports %d",
			cfg.Interval, cfg.BatchTimeout, cfg.BatchSize, cfg.MaxPending, cfg.FleetSize, cfg.MaxReports)
	}
	if cfg.Interval == 0 {
		cfg.Interval = round.DefaultInterval
	}
	if cfg.BatchTimeout == 0 {
		cfg.BatchTimeout = max(deps.Breaker.Timeout(), 5*cfg.Interval, 250*time.Millisecond)
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = round.DefaultBatchSize
	}
	if cfg.MaxReports == 0 {
		cfg.MaxReports = 4 * cfg.BatchSize
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = round.DefaultMaxPending
	}
	if cfg.MaxPendingBytes == 0 {
		cfg.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if cfg.ActiveWindow <= 0 {
		cfg.ActiveWindow = remote.DefaultActiveWindow
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &Reporter{Runner: round.New(cfg.Interval, cfg.Jitter, cfg.OnRound), cfg: cfg, deps: deps, log: log,
		counters: newCounters(cfg.MaxPending, max(cfg.MaxPendingBytes, 0)), round: new(remote.Round),
		named: make(map[string]struct{}), leases: make(map[keyLim]*lease)}
	r.seqs.next = deps.Clock.Now().UnixMicro()
	deps.Engine.SetFleet(cfg.FleetSize, 1)
	return r, nil
}

// Interval returns the time between rounds.
func (r *Reporter) Interval() time.Duration { return r.cfg.Interval }

// Run runs rounds every interval, with jitter, until ctx is done. Leases are
// checked every interval on a goroutine of their own, so a round that takes
// long (a slow Redis) never lets a lapsed share be used.
func (r *Reporter) Run(ctx context.Context) {
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
				r.expireLeases()
			}
		}
	}()
	defer wg.Wait()
	r.Loop(ctx, func(ctx context.Context) { _ = r.Round(ctx) })
}

// Start runs the node's first round, bounded by ctx alone rather than by
// the batch timeout: a Redis far away at start is slow, not dead. New's
// first contact calls it, within its StartupTimeout.
func (r *Reporter) Start(ctx context.Context) error {
	r.Starting.Store(true)
	defer r.Starting.Store(false)
	return r.Round(ctx)
}

// Round runs one round now: takes the engine's due spend, reports the keys
// that need it, and seeds the keys Redis answered for. It returns why the
// round failed, if it did; the spend it could not send is kept for the next.
func (r *Reporter) Round(ctx context.Context) error {
	info, err := r.spendRound(ctx, false)
	r.Done(info)
	return err
}

// takenKeep is the capacity of the taken-spend buffer a round keeps; one
// that grew past it (the backlog of an outage, a flood of evicted keys) is
// let go, so the peak does not stay live.
const takenKeep = 4096

// releaseTaken drops the key strings of the spend taken for the GC, and
// the buffer itself if a large round grew it.
func (r *Reporter) releaseTaken() {
	clear(r.taken)
	if cap(r.taken) > takenKeep {
		r.taken = nil
	}
}

// now returns the local time and the time on Redis's clock.
func (r *Reporter) now() (time.Time, int64) {
	t := r.deps.Clock.Now()
	return t, r.deps.Offset.Map(t)
}

// lose counts spend that will never reach Redis, and says so.
func (r *Reporter) lose(weight int64, why string, args ...any) {
	if weight <= 0 {
		return
	}
	r.stats.lost.Add(uint64(weight))
	r.log.Warn("reports: spend lost: "+why, append([]any{"weight", weight, "lost_total", r.stats.lost.Load()}, args...)...)
}

// losePending counts and logs spend the counters had no room for: beyond
// MaxPending keys (logged every round it happens), or beyond MaxPendingBytes
// (logged once).
func (r *Reporter) losePending(lost int64) {
	r.mu.Lock()
	byBytes := r.counters.bytesLost
	r.counters.bytesLost = 0
	first := byBytes > 0 && !r.bytesLogged
	r.bytesLogged = r.bytesLogged || byBytes > 0
	bytes := r.counters.bytes
	r.mu.Unlock()
	if byBytes > 0 {
		r.stats.pendingDropped.Add(uint64(byBytes))
		r.stats.lost.Add(uint64(byBytes))
		if first {
			r.log.Warn("reports: spend lost: the spend waiting for redis reached MaxPendingBytes; spend of new keys is dropped until redis takes it (counted in Stats().Reconcile.PendingDropped and LostSpend; logged once)",
				"weight", byBytes, "max_pending_bytes", r.cfg.MaxPendingBytes, "pending_bytes", bytes)
		}
	}
	if rest := lost - byBytes; rest > 0 {
		r.lose(rest, "too many keys to keep a count of", "max_pending", r.cfg.MaxPending)
	}
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
func (r *Reporter) Flush(ctx context.Context) error {
	err := r.Retry(ctx, func() error {
		info, err := r.spendRound(ctx, true)
		r.Done(info)
		if err != nil && r.Unreported() == 0 {
			return nil // nothing to report: the failed round carried only the heartbeat
		}
		return err
	}, func() time.Duration { return r.deps.Breaker.ProbeIn() },
		func(err error) bool { _, bounded := ctx.Deadline(); return !bounded && errors.Is(err, breaker.ErrOpen) })
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
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("reports: flush: %d keys (%d in weight) not reported: %w", keys, weight, err)
	}
	if keys > 0 {
		return fmt.Errorf("reports: flush: %d keys (%d in weight) not reported", keys, weight)
	}
	return nil
}

// Unreported returns how many keys hold spend that Redis has not
// acknowledged: those counted in rounds, and those the engine holds that no
// round has taken yet. While a round is in flight it counts what that round
// carries as if it failed, plus what was spent since: an upper bound.
func (r *Reporter) Unreported() int {
	if !r.Lock.TryAcquire() {
		return int(r.stats.pending.Load()) + r.deps.Engine.Untaken()
	}
	defer r.Lock.Release()
	r.mu.Lock()
	n := r.counters.unacked()
	r.mu.Unlock()
	return n + r.deps.Engine.Untaken()
}

// Pending returns the spend of (key, lim) this node took from the engine
// in the current window and Redis has not acknowledged, and the window (zero
// for the buckets): what a sync decision seeds the engine with
// (local.Engine.Seed) and its estimate leaves out. ok is false, and nothing
// is known, when a round holds the reporter: a decision never waits on a
// round that reads every counter.
func (r *Reporter) Pending(key string, lim limit.Limit) (pending, window int64, ok bool) {
	if lim.Validate() != nil {
		return 0, 0, true // nothing is counted for a limit the store refuses
	}
	_, rnow := r.now()
	window = r.windowOf(lim, rnow)
	if !r.mu.TryLock() {
		return 0, window, false
	}
	defer r.mu.Unlock()
	if c := r.counters.m[keyOf(key, lim, window)]; c != nil {
		pending = c.total - heldWeight(c) - c.acked
	}
	return pending, window, true
}

// Estimate returns this node's estimate of the global state of (key, lim),
// for a sync decision to restore the key from if Redis lost it: the
// engine's, without the spend this node has yet to have acknowledged, which
// its reports add (local.Engine.Estimate). While a round holds the
// reporter, the pending spend is not known and stays in: Redis may then
// restore the key above what was spent, never below.
func (r *Reporter) Estimate(key string, lim limit.Limit) limit.State {
	pending, window, _ := r.Pending(key, lim)
	est, _ := r.deps.Engine.Estimate(key, lim, pending, window)
	return est
}

// Restart starts (key, lim) afresh in this node's memory: Redis's state of
// it was reset (remote.Store.Reset).
func (r *Reporter) Restart(key string, lim limit.Limit) {
	_, rnow := r.now()
	r.deps.Engine.Restart(rnow, key, lim)
}

// Stats returns the reconciler's counters.
func (r *Reporter) Stats() round.Stats {
	rounds, failed := r.Rounds()
	return round.Stats{
		Rounds: rounds, RoundErrors: failed, KeysSent: r.stats.keys.Load(),
		Deferred: r.stats.deferred.Load(), LostSpend: r.stats.lost.Load(), StateLost: r.stats.lostState.Load(),
		KeyFaults: r.stats.faults.Load(), PendingDropped: r.stats.pendingDropped.Load(), PendingBytes: r.stats.pendingBytes.Load(), UncertainForced: r.seqs.forcedCount(), Leases: int(r.stats.leases.Load()), Pending: int(r.stats.pending.Load()),
		Nodes: r.Nodes(), LastRound: r.Last(),
	}
}

// windowOf is the window of lim that rnow (Unix ns, Redis's clock) falls
// in, as the engine numbers it (limit.Limit.WindowAt, calendar limits
// included); zero for the buckets.
func (r *Reporter) windowOf(lim limit.Limit, rnow int64) int64 {
	if lim.Algorithm.IsBucket() || (lim.Calendar == limit.NoCalendar && lim.Period <= 0) {
		return 0 // a window limit without a period is invalid: never a division by zero
	}
	loc, err := r.zones.Load(lim.Zone)
	if err != nil {
		loc = nil // a limit that reached a decision has a zone that loads: UTC, never a panic
	}
	return lim.WindowAt(rnow, loc).Index
}

// comparePicks orders picks most pressing first, and among equals a key's
// older counter first (epochs are unique: the order is total).
func comparePicks(a, b pick) int {
	if a.prio != b.prio {
		return b.prio - a.prio
	}
	return cmp.Compare(a.c.epoch, b.c.epoch)
}

// sortPicks orders picks most pressing first.
func sortPicks(p []pick) { slices.SortFunc(p, comparePicks) }

// topPicks moves the k most pressing of p to its front, in order, and
// returns them: what sorting all of p and keeping k would, in O(n log k)
// rather than O(n log n) (a round after an outage looks at every counter
// with spend waiting, a million of them, and reports a few thousand).
func topPicks(p []pick, k int) []pick {
	if k <= 0 {
		return p[:0]
	}
	if len(p) <= k {
		sortPicks(p)
		return p
	}
	// p[:k] is a heap whose root is the least pressing of the k kept.
	h := p[:k]
	worse := func(i, j int) bool { return comparePicks(h[i], h[j]) > 0 }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= k {
				return
			}
			m := l
			if r := l + 1; r < k && worse(r, l) {
				m = r
			}
			if !worse(m, i) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for _, x := range p[k:] {
		if comparePicks(x, h[0]) < 0 {
			h[0] = x
			down(0)
		}
	}
	sortPicks(h)
	return h
}
