// Package async runs Async mode's share protocol (package protocol) against
// Redis: a heartbeat every interval, each op as soon as it is ready, the
// protocol's timers, the calls other nodes publish, and the ledger of what
// the node admitted. No decision waits on it, except a request the node's
// share cannot admit, which may wait for the fleet up to AskWait (Ask).
package async

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/share"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
	"github.com/hybridlimit/hybridlimit/sync/round"
)

// Store is the store's side of Async mode: the share protocol's ops
// and heartbeat, the calls published between heartbeats, and the ledger.
// remote.Store is one.
type Store interface {
	ShareOps(ctx context.Context, set share.Settings, ops []share.Op, replies []share.Reply) error
	ShareBeat(ctx context.Context, b *share.Beat, r *share.BeatReply) error
	SubscribeCalls(ctx context.Context, l remote.CallListener) (stop func())
	AddToLedgers(ctx context.Context, entries []remote.LedgerEntry, errs []error) error
}

// Config configures a Runner. Zero fields mean their defaults.
type Config struct {
	// Interval, AskWait, Lease, HomeLease, ActiveWindow and FleetSize are
	// the share protocol's (protocol.Config).
	Interval, AskWait, Lease, HomeLease, ActiveWindow time.Duration
	FleetSize                                         int
	// Jitter spreads heartbeats by up to ±Jitter of the interval. Zero
	// means 0.1; negative means none.
	Jitter float64
	// CallTimeout bounds each call to Redis. Zero means the breaker's
	// timeout.
	CallTimeout time.Duration
	// BatchSize is the most ops one call carries. Zero means 2,000.
	BatchSize int
	// Ledger keeps every key's ledger in Redis: what the fleet admitted on
	// it (remote.Store.AsyncLedger), sent every few rounds and at Flush.
	Ledger bool
	// MaxPending bounds the keys the ledger keeps counts for while Redis
	// has not acknowledged them. Zero means 1,048,576.
	MaxPending int
	// Logger receives what changes decisions. Nil means slog.Default().
	Logger *slog.Logger
	// OnRound, if set, is called after every heartbeat round.
	OnRound func(round.Info)
}

// Deps are the parts a Runner works with, shared with the limiter.
type Deps struct {
	Engine  *local.Engine
	Store   Store
	Breaker *breaker.Breaker
	Clock   clock.Clock
	Offset  *clock.Offset
}

// Runner reconciles a Async-mode node: it runs the share protocol (Shares)
// against the store, a heartbeat every interval and each op as soon as it
// is ready (on a busy node, an op no request waits on is gathered with
// those that follow for up to a tenth of the interval: gather), and keeps
// the ledger. No decision waits on it, except a
// request the node's share cannot admit, which may wait for the fleet up to
// AskWait (Ask).
type Runner struct {
	round.Runner
	cfg  Config
	deps Deps
	log  *slog.Logger
	sh   *protocol.Shares

	wakeOps, wakeBeat, wakeTick chan struct{}
	// resting: the timers sleep longer than an interval (the node is at
	// rest), and a request that asks wakes them.
	resting atomic.Bool
	sending sync.Mutex // one call of ops at a time
	// gather is how long the sender waits for more ops before a call,
	// lastCall when the last call of ops began (Unix ns; zero: none yet).
	gather   gather
	lastCall atomic.Int64

	ledger *ledger
	// opsBatch and ledgerBatch size the calls of ops and of the ledger,
	// each by what its calls took (batch).
	opsBatch, ledgerBatch *batch
	timeout               time.Duration // each call's, CallTimeout or the breaker's

	stats struct {
		sent, lost atomic.Uint64
	}
}

// New returns a Runner of deps. The engine must run in Asks mode
// (local.Config.Asks).
func New(cfg Config, deps Deps) (*Runner, error) {
	if deps.Engine == nil || deps.Store == nil || deps.Breaker == nil || deps.Clock == nil || deps.Offset == nil {
		return nil, errors.New("async: every dependency is required")
	}
	if cfg.Interval < 0 || cfg.Lease < 0 || cfg.HomeLease < 0 || cfg.ActiveWindow < 0 || cfg.FleetSize < 0 || cfg.BatchSize < 0 || cfg.MaxPending < 0 || cfg.CallTimeout < 0 {
		return nil, fmt.Errorf("async: negative interval %v, lease %v, home lease %v, active window %v, fleet size %d, batch size %d, max pending %d or call timeout %v",
			cfg.Interval, cfg.Lease, cfg.HomeLease, cfg.ActiveWindow, cfg.FleetSize, cfg.BatchSize, cfg.MaxPending, cfg.CallTimeout)
	}
	if cfg.Interval == 0 {
		cfg.Interval = round.DefaultInterval
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = round.DefaultBatchSize
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = round.DefaultMaxPending
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Runner{Runner: round.New(cfg.Interval, cfg.Jitter, cfg.OnRound), cfg: cfg, deps: deps, log: cfg.Logger,
		wakeOps: make(chan struct{}, 1), wakeBeat: make(chan struct{}, 1), wakeTick: make(chan struct{}, 1),
		ledger: newLedger(cfg.MaxPending), opsBatch: newBatch(cfg.BatchSize), ledgerBatch: newBatch(cfg.BatchSize),
		gather: newGather(cfg.Interval)}
	a.ledger.now = deps.Clock.Now
	timeout := cfg.CallTimeout
	if timeout == 0 {
		timeout = deps.Breaker.Timeout()
	}
	a.timeout = timeout
	node := ""
	if n, ok := deps.Store.(interface{ Node() string }); ok {
		node = n.Node()
	}
	a.sh = protocol.New(protocol.Config{Node: node, Interval: cfg.Interval, AskWait: cfg.AskWait, Lease: cfg.Lease, HomeLease: cfg.HomeLease,
		ActiveWindow: cfg.ActiveWindow, FleetSize: cfg.FleetSize, Logger: cfg.Logger,
		Recovery: deps.Breaker.OpenFor() + timeout + cfg.Interval, Grace: timeout, Spent: a.spent}, deps.Engine)
	a.sh.SetWake(func(w protocol.Wake) {
		if w == protocol.WakeBeat {
			signal(a.wakeBeat)
		} else {
			signal(a.wakeOps)
			if a.resting.Load() {
				signal(a.wakeTick) // the timers sleep past an interval: they must see the request's deadline
			}
		}
	})
	return a, nil
}

// How often the runner sweeps idle keys and sends the ledger, and how a key
// Redis refuses is retried.
const (
	// sweepEvery is how many rounds pass between sweeps of idle keys.
	sweepEvery = 10
	// sweepPerShard bounds the keys a sweep looks at per shard.
	sweepPerShard = 64
	// faultRetry is how long a key the store refuses waits before it is
	// tried again.
	faultRetry = 5 * time.Second
	// unheardAfter is how long after Run starts a channel never subscribed
	// is logged.
	unheardAfter = 5 * time.Second
)

// spent counts spend the protocol took from the engine into the ledger.
func (a *Runner) spent(s local.Spend) {
	if !a.cfg.Ledger {
		return
	}
	if lost := a.ledger.add(s.Key, s.Limit, s.Spent, a.deps.Clock.Now()); lost > 0 {
		a.stats.lost.Add(uint64(lost))
	}
}

// signal wakes whoever waits on c, without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Shares returns the protocol the node runs.
func (a *Runner) Shares() *protocol.Shares { return a.sh }

// Interval returns the time between heartbeats.
func (a *Runner) Interval() time.Duration { return a.cfg.Interval }

// now is the time on Redis's clock (Unix ns), as this node maps it.
func (a *Runner) now() int64 { return a.deps.Offset.Map(a.deps.Clock.Now()) }

// Start beats the node's first heartbeat, bounded by ctx alone: the fleet
// learns of the node, and the node learns the fleet, the contested keys and
// Redis's clock before it decides anything. Without FleetSize it then
// waits StartSettle (within ctx's deadline) and beats again, so that it
// divides by the nodes started with it.
func (a *Runner) Start(ctx context.Context) error {
	a.Starting.Store(true)
	defer a.Starting.Store(false)
	if err := a.read(ctx); err != nil {
		return err
	}
	wait := a.sh.StartSettle()
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil // the fleet as first read, by ctx's deadline
	case <-t.C:
	}
	_ = a.read(ctx) // should it fail, the first reading stands, and Run beats on
	return nil
}

// read beats until the registry's changes are read whole.
func (a *Runner) read(ctx context.Context) error {
	for {
		info, sent, err := a.beat(ctx)
		if sent {
			a.Done(info)
		}
		if err != nil || !a.sh.More() {
			return err
		}
	}
}

// Run runs the protocol until ctx is done: heartbeats every interval (and
// at once when a call must reach the registry), ops as soon as they are
// ready, the protocol's timers, and the calls other nodes publish.
func (a *Runner) Run(ctx context.Context) {
	stop := a.deps.Store.SubscribeCalls(ctx, remote.CallListener{
		Heard:      func(c share.Contest) { a.sh.Heard(c, a.now()) },
		Joined:     a.sh.Joined,
		Subscribed: func() { a.sh.Subscribed(a.now()) },
	})
	defer stop()
	deaf := time.AfterFunc(unheardAfter, func() {
		if !a.sh.Listening() {
			a.log.Warn("async: the fleet's channel is not heard (pub/sub denied or unavailable): this node beats every interval, at rest too, to read calls from the registry in time",
				"channel_unheard_for", unheardAfter, "interval", a.cfg.Interval)
		}
	})
	defer deaf.Stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.sendLoop(ctx) }()
	go func() { defer wg.Done(); a.tickLoop(ctx) }()
	defer wg.Wait()
	n := 0
	timer := time.NewTimer(a.Next())
	defer timer.Stop()
	for {
		due := true
		select {
		case <-ctx.Done():
			return
		case <-a.wakeBeat:
		case <-timer.C:
			timer.Reset(a.rest())
			n++
			if a.cfg.Ledger && n%sweepEvery == 0 {
				a.sendLedger(ctx, false)
			}
			if n%sweepEvery == 0 {
				a.deps.Engine.Sweep(a.now(), sweepPerShard)
			}
			due = a.sh.BeatDue(a.now())
		}
		signal(a.wakeTick)
		for due {
			info, sent, err := a.beat(ctx)
			if sent {
				a.Done(info)
			}
			if err != nil || !a.sh.More() || ctx.Err() != nil {
				break
			}
		}
		a.opsReady()
	}
}

// Round runs one round now: the protocol's timers, a heartbeat, and the ops
// ready. It returns why the heartbeat or the ops failed, if they did.
func (a *Runner) Round(ctx context.Context) error {
	a.sh.Tick(a.now())
	info, sent, err := a.beat(ctx)
	if sent {
		a.Done(info)
	}
	if err != nil {
		return err
	}
	return a.send(ctx)
}

// beat sends one heartbeat, unless one is in flight (sent false).
func (a *Runner) beat(ctx context.Context) (info round.Info, sent bool, err error) {
	b := a.sh.NextBeat(a.now())
	if b == nil {
		return round.Info{}, false, nil
	}
	at, began := a.deps.Clock.Now(), time.Now()
	r := new(share.BeatReply) // the call's own: one abandoned at its timeout may still write it
	_, err = breaker.Call(ctx, a.deps.Breaker, a.Timeout(ctx, a.cfg.CallTimeout), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, a.deps.Store.ShareBeat(ctx, b, r)
	})
	received := a.deps.Clock.Now()
	info = round.Info{Duration: received.Sub(at), Err: err}
	if err != nil {
		if remote.IsKeyFault(err) {
			a.sh.Refused("", limit.Limit{}, "the fleet's registry (heartbeats go on failing: the node keeps the fleet it knew)", err)
		}
		a.sh.BeatDone(b, nil, err, a.now())
		return info, true, err
	}
	if len(b.Contests) <= fewOps && len(r.Changes) <= fewOps {
		// All but a round trip: the calls' sizers learn it from the
		// beats too (a node at rest sends no ops).
		took := time.Since(began)
		a.opsBatch.roundTrip(took)
		a.ledgerBatch.roundTrip(took)
	}
	a.deps.Offset.Observe(at, time.Unix(0, share.Nanos(r.Now)), received)
	a.sh.BeatDone(b, r, nil, a.now())
	info.Nodes, info.Keys = r.Nodes, len(b.Contests)
	return info, true, nil
}

// sendLoop sends the ops ready whenever woken.
// rest is how long the heartbeat loop sleeps before its next round: an
// interval (with its jitter, Next), or, while the node is at rest, until its
// next quiet beat: a node at rest wakes a few times a second.
func (a *Runner) rest() time.Duration {
	if d := a.sh.Rest(a.now()); d > a.cfg.Interval {
		return d
	}
	return a.Next()
}

func (a *Runner) sendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wakeOps:
			if !a.gatherOps(ctx) {
				return
			}
			a.send(ctx)
		}
	}
}

// gatherOps waits, while the node is busy and no op to send has a request
// waiting on it, for the ops made in the gather window to go in the same
// call (gather); false if ctx ended meanwhile.
func (a *Runner) gatherOps(ctx context.Context) bool {
	last := time.Time{}
	if ns := a.lastCall.Load(); ns != 0 {
		last = time.Unix(0, ns)
	}
	d := a.gather.before(a.deps.Clock.Now(), last)
	if d <= 0 || a.sh.Urgent() {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// send sends every op ready, in calls of at most BatchSize (fewer when
// calls have been slow: batch), until none is left or a call fails (the
// failed ops are sent again when next woken).
func (a *Runner) send(ctx context.Context) error {
	a.sending.Lock()
	defer a.sending.Unlock()
	set := a.sh.Settings()
	for {
		ops := a.sh.NextOps(a.now(), a.opsBatch.next())
		if len(ops) == 0 {
			return nil
		}
		replies := make([]share.Reply, len(ops)) // the call's own, as the beat's reply
		a.lastCall.Store(a.deps.Clock.Now().UnixNano())
		timeout, sent := a.Timeout(ctx, a.timeout), time.Now()
		_, err := breaker.Call(ctx, a.deps.Breaker, timeout, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, a.deps.Store.ShareOps(ctx, set, ops, replies)
		})
		a.opsBatch.done(len(ops), time.Since(sent), timeout, err)
		if err != nil && remote.IsKeyFault(err) {
			err = nil // every op's key refused: each reply says so
		}
		unreachable := errors.Is(err, breaker.ErrOpen) || a.deps.Breaker.State() == breaker.Open
		got := replies // the closure's variable stays as it is: a call abandoned at its timeout still reads it
		if err != nil {
			got = nil
		}
		a.sh.OpsDone(ops, got, err, unreachable, a.now())
		if err != nil {
			return err
		}
		a.stats.sent.Add(uint64(len(ops)))
		signal(a.wakeTick)
	}
}

// opsReady wakes the sender if some key has an op to send: a node at rest,
// which beats and sweeps a few times a second, has none, and its sender
// sleeps through.
func (a *Runner) opsReady() {
	if a.sh.Pending() {
		signal(a.wakeOps)
	}
}

// tickLoop runs the protocol's timers: at the time Tick asks for, at least
// every interval, and whenever woken.
func (a *Runner) tickLoop(ctx context.Context) {
	timer := time.NewTimer(a.cfg.Interval)
	defer timer.Stop()
	for {
		now := a.now()
		next := a.sh.Tick(now)
		a.opsReady()
		d := min(max(time.Duration(next-now), 100*time.Microsecond), max(a.cfg.Interval, protocol.QuietBeat))
		a.resting.Store(d > a.cfg.Interval)
		if d > a.cfg.Interval && a.sh.Waiting() {
			// A request began to wait since Tick looked (before resting
			// was set, so it did not wake the timers): not a rest.
			d = a.cfg.Interval
			a.resting.Store(false)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-a.wakeTick:
		}
	}
}

// Answer is what became of a request the node's share could not admit.
type Answer struct {
	// Verdict is the protocol's: Retry (decide again: the share changed),
	// Refuse (no room in the fleet until Until), Expired (no room within
	// AskWait), Unreachable (decide under the fallback), Admitted (the
	// store admitted it from the fleet's pool, at Until).
	Verdict protocol.Verdict
	Until   int64 // Unix ns on Redis's clock
}

// Ask waits for the fleet to make room for a request of weight n on (key,
// lim) that the node's share could not admit at now (ns; local.ErrShort),
// first made at asked (ns), until deadline (ns, Redis's clock) or ctx's
// end. It never waits while the breaker is open (Unreachable).
func (a *Runner) Ask(ctx context.Context, now, asked int64, key string, lim limit.Limit, n, deadline int64) Answer {
	if a.deps.Breaker.State() == breaker.Open {
		return Answer{Verdict: protocol.Unreachable}
	}
	w, refuse, until := a.sh.Short(now, asked, key, lim, n, deadline, nil)
	if refuse {
		return Answer{Verdict: protocol.Refuse, Until: until}
	}
	// The protocol settles the request by its deadline, or, while the
	// store has the ask in hand, by the call's timeout after it (Grace);
	// this timer is the last resort.
	timer := time.NewTimer(max(time.Duration(deadline-now), 0) + a.sh.Config().Grace + time.Millisecond)
	defer timer.Stop()
	select {
	case <-w.Done():
	case <-ctx.Done():
		a.sh.Abandon(key, lim, w)
	case <-timer.C:
		a.sh.Abandon(key, lim, w)
	}
	v, at := w.Verdict()
	if v == protocol.Admitted && a.cfg.Ledger {
		a.ledger.add(key, lim, n, a.deps.Clock.Now())
	}
	return Answer{Verdict: v, Until: at}
}

// AskWait returns how long a request may wait for the fleet (negative:
// never).
func (a *Runner) AskWait() time.Duration { return a.sh.Config().AskWait }

// Flush gives back every grant this node holds, sends the ledger whole,
// and leaves the fleet: the others divide by one node fewer at once. It
// returns nil when every grant and all the ledger reached Redis, else why
// not (a leave Redis did not hear is logged: nothing is lost by it). It returns by
// ctx's deadline.
func (a *Runner) Flush(ctx context.Context) error {
	a.sh.Leave()
	a.ledger.beginFlush()
	err := a.Retry(ctx, func() error {
		if err := a.send(ctx); err != nil {
			return err
		}
		if h := a.sh.Holding(); h > 0 {
			return fmt.Errorf("%d keys still hold a share", h)
		}
		if a.cfg.Ledger {
			return a.sendLedger(ctx, true)
		}
		return nil
	}, func() time.Duration { return a.deps.Breaker.ProbeIn() },
		func(err error) bool { _, bounded := ctx.Deadline(); return !bounded && errors.Is(err, breaker.ErrOpen) })
	if err == nil {
		_, err = breaker.Call(ctx, a.deps.Breaker, a.cfg.CallTimeout, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, a.deps.Store.ShareBeat(ctx, &share.Beat{Leave: true}, new(share.BeatReply))
		})
		if err != nil {
			// Nothing is lost: the others keep counting this node until its
			// entry lapses (ActiveWindow), and divide by one node fewer then.
			a.log.Warn("async: could not tell the fleet this node leaves: the others count it until its entry lapses",
				"err", err, "active_window", a.sh.Config().ActiveWindow)
			err = nil
		}
	}
	if err != nil {
		keys, weight := a.ledger.unacked()
		return fmt.Errorf("async: flush: %d keys' grants not given back, %d keys (%d in weight) of the ledger not reported: %w",
			a.sh.Holding(), keys, weight, err)
	}
	return nil
}

// sendLedger takes the engine's spend into the ledger and sends what Redis
// has not acknowledged: every key when flushing, else a batch.
func (a *Runner) sendLedger(ctx context.Context, flush bool) error {
	now := a.deps.Clock.Now()
	taken := a.deps.Engine.TakeSpend(nil)
	a.sh.Took(taken)
	lost := a.ledger.take(taken, now)
	if d := a.deps.Engine.Dropped(); d > a.ledger.dropped {
		lost += int64(d - a.ledger.dropped)
		a.ledger.dropped = d
	}
	if lost > 0 {
		a.stats.lost.Add(uint64(lost))
		a.log.Warn("async: ledger weight lost: too many keys to keep a count of", "weight", lost,
			"lost_total", a.stats.lost.Load(), "max_pending", a.cfg.MaxPending)
	}
	for {
		entries := a.ledger.entries(a.ledgerBatch.next(), flush)
		if len(entries) == 0 {
			return nil
		}
		errs := make([]error, len(entries))
		timeout, sent := a.Timeout(ctx, a.timeout), time.Now()
		_, err := breaker.Call(ctx, a.deps.Breaker, timeout, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, a.deps.Store.AddToLedgers(ctx, entries, errs)
		})
		a.ledgerBatch.done(len(entries), time.Since(sent), timeout, err)
		if err != nil {
			a.ledger.unsent(entries)
			return err
		}
		for i, err := range errs {
			if err != nil && remote.IsKeyFault(err) {
				a.sh.Refused(entries[i].Key, entries[i].Limit, "a key's ledger", err)
				a.ledger.holdOff(entries[i], now.Add(faultRetry))
			}
		}
		if fault := a.ledger.acked(entries, errs); fault != nil && !remote.IsKeyFault(fault) {
			return fault
		}
		if !flush {
			return nil
		}
	}
}

// Unreported returns how many keys hold ledger weight Redis has not
// acknowledged (with Ledger: the engine's spend not yet taken too), or a
// grant not yet given back.
func (a *Runner) Unreported() int {
	keys, _ := a.ledger.unacked()
	if a.cfg.Ledger {
		keys += a.deps.Engine.Untaken()
	}
	return keys + a.sh.Holding()
}

// Stats returns the reconciler's counters.
func (a *Runner) Stats() round.Stats {
	sh := a.sh.Stats()
	keys, _ := a.ledger.unacked()
	rounds, failed := a.Rounds()
	return round.Stats{Rounds: rounds, RoundErrors: failed, KeysSent: a.stats.sent.Load(),
		LostSpend: a.stats.lost.Load(), StateLost: sh.Lost, KeyFaults: sh.Faults, Leases: sh.Contested,
		Pending: keys, Nodes: sh.Nodes, LastRound: a.Last(), Shares: sh}
}

// Reset starts (key, lim) afresh on this node and, through the registry,
// on every other: Redis's state of it was reset at at (Unix ns;
// remote.Store.ResetShares).
func (a *Runner) Reset(key string, lim limit.Limit, at int64) { a.sh.Reset(a.now(), key, lim, at) }
