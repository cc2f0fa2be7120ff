// Package protocol is the node's side of Async mode's share protocol
// (docs/protocol.md): which share of each key the node decides in, what it
// tells the store, and what it does with the answers. It does no I/O and
// reads no clock: a runner (package async, or the simulation in
// internal/sharesim) takes the heartbeat and the ops it has ready, sends
// them, and hands back the replies, each at a time the caller gives.
package protocol

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/share"
)

// Defaults of Config's zero fields.
const (
	// DefaultInterval is the time between rounds.
	DefaultInterval = 20 * time.Millisecond
	// DefaultHomeLease is the default HomeLease: a key used on one node
	// only is decided there from memory while its requests come less than
	// 10 s apart.
	DefaultHomeLease = 20 * time.Second
	// DefaultMaxAskWait caps the default AskWait: the calls that make
	// room travel on a channel, not with the heartbeats, so a long interval
	// need not mean a long wait.
	DefaultMaxAskWait = 100 * time.Millisecond
	// registryPage is the most registry changes one heartbeat reads.
	registryPage = 1000
	// faultRetry is how long a key the store refuses waits before it is
	// tried again.
	faultRetry = 5 * time.Second
	// margin is how close a request may come to room before it is refused:
	// the fleet knows each request's time only to within a round trip, so
	// one the fleet has room for within margin waits for it (a request an
	// exact limiter admits, a hair early for the shares' rounding and the
	// network's jitter); one later than that is refused at once.
	margin = 2 * time.Millisecond
	// overFor is how many intervals after the store said the fleet had no
	// room for a key a request short of the node's share is refused alone
	// while an op asks for room for the next (Shares.overLimit). Longer
	// kept more of W1's requests from waiting (1 s: 14% waited, against
	// 18% at 200 ms and 23.5% without) but refused more the limit allowed
	// (the room came back while the node still refused alone: 218 requests
	// below an exact limiter in 10 s, against 48 at 200 ms and 34 without).
	overFor = 10
	// maxNamedKeys bounds the keys named in the logs of refused keys, so a
	// flood of bad keys cannot flood the log; beyond it they are counted.
	maxNamedKeys = 1024
)

// Config configures a Shares. Zero fields mean their defaults.
type Config struct {
	// Node is this node's name in the fleet's registry: a heartbeat that
	// finds the node was not in the fleet drops its grants only if the
	// registry recorded its departure (others may have its grants), not
	// after Redis restarted empty (its contests are rebuilt from them).
	// Empty: every such heartbeat drops them.
	Node string
	// Interval is the time between rounds (heartbeats): how soon a node
	// hears a call. Zero means 20 ms.
	Interval time.Duration
	// AskWait bounds how long a request the node's share cannot admit
	// waits for the fleet to give it room. Zero means two intervals, at
	// most 100 ms; negative means never: such a request is refused at once.
	AskWait time.Duration
	// Lease is how long a grant holds unless renewed. Zero means 50
	// intervals, at least 1 s.
	Lease time.Duration
	// HomeLease is how long a home (the whole key, granted to the one node
	// that uses it) holds unless renewed: the node keeps it while its key
	// goes unused for less than half of it, at the cost of a renewal every
	// half a HomeLease while used. A node that stops beating uses none of
	// its grants an active window after its last beat, and the store lets
	// the others have them as soon as they know it has gone (registry
	// departures): a long HomeLease does not keep a dead node's keys from
	// the fleet. Zero means 20 s, at least Lease.
	HomeLease time.Duration
	// ActiveWindow is how long a node counts in the fleet after its last
	// heartbeat: the even split never divides by fewer nodes than the most
	// seen within it. Zero means 50 intervals, at least 1 s.
	ActiveWindow time.Duration
	// FleetSize, when positive, is a floor on the fleet's size.
	FleetSize int
	// Spent, if set, is told of the spend the protocol takes from the
	// engine with a key's demand (the ledger's, which Async keeps), under
	// the protocol's lock.
	Spent func(local.Spend)
	// Recovery is how long a node may go on deciding degraded after the
	// store can be reached again: its circuit breaker's open time and a
	// call's timeout. The store holds back the share of a node that went
	// silent that much longer than a lease. Zero means 50 intervals.
	Recovery time.Duration
	// Grace is how much longer than AskWait a request waits when the
	// store has its key's op in hand but has not answered: at most a
	// call's timeout, after which the call has failed (and the breaker
	// decides whether the store is unreachable: then the request is
	// decided under the fallback, as every other while Redis is down)
	// or come back. Zero: none, the request is refused at AskWait.
	Grace time.Duration
	// Logger receives what changes decisions (a key the store refuses, a
	// contest the store lost). Nil means slog.Default().
	Logger *slog.Logger
}

// withDefaults fills cfg's zero fields.
func (cfg Config) withDefaults() Config {
	cfg.Interval = cmp.Or(cfg.Interval, DefaultInterval)
	if cfg.AskWait == 0 {
		cfg.AskWait = min(2*cfg.Interval, DefaultMaxAskWait)
	}
	if cfg.Lease == 0 {
		cfg.Lease = max(50*cfg.Interval, time.Second)
	}
	if cfg.HomeLease == 0 {
		cfg.HomeLease = DefaultHomeLease
	}
	cfg.HomeLease = max(cfg.HomeLease, cfg.Lease)
	if cfg.ActiveWindow == 0 {
		cfg.ActiveWindow = max(50*cfg.Interval, time.Second)
	}
	if cfg.Recovery == 0 {
		cfg.Recovery = 50 * cfg.Interval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Shares runs Async mode's share protocol on one node (docs/protocol.md):
// which share of each key the node decides in, what it tells the store and
// what it does with the answers. It never calls the store itself: a runner
// (Run, or a simulation) takes the heartbeat and the ops it has ready,
// sends them, and hands back the replies, so that every step happens at a
// time the caller gives (the store's clock, in Unix ns, as the node maps
// it). It is safe for concurrent use.
//
// Lock order: mu, then the engine's shards, then cmu.
type Shares struct {
	cfg Config
	eng *local.Engine
	log *slog.Logger

	mu   sync.Mutex
	keys map[keyLim]*keyState
	// left: Leave was called (the node closes). A request short after it
	// is refused, and no op asks for more.
	left bool
	// order holds the keys in the order they were made (and, until Tick
	// sweeps them out, some forgotten since): Tick and Leave visit them
	// in a fixed order (the simulation replays exactly) without sorting
	// every key each tick.
	order []*keyState
	// waiting holds the keys requests wait on (and, until Tick sweeps
	// them out, some no longer): Tick visits them on every wake, and every
	// key only once an interval, at nextSweep (ns).
	waiting   []*keyState
	nextSweep int64
	// valid is what the engine was last told its grants are good until (µs).
	valid int64
	// busy counts, as of the last sweep, the keys that hold a grant or
	// have an op, an intent or a request waiting: BeatDue.
	busy   int
	queue  []*keyState // keys with an op to send
	queued map[*keyState]bool
	calls  []share.Contest // registry entries to send with the next beat
	// aloud are registrations a node new to the fleet sends again
	// (registerAloud), a page a beat: a node holding many homes would
	// otherwise hold Redis in one long script just after it restarted.
	aloud   []share.Contest
	fleet   fleetView
	from    int64 // the registry's changes read up to (stamp)
	read    bool  // the registry was read whole once (the node's first beat)
	more    bool  // the registry has more changes to read
	seq     int64 // the last op sequence number used
	beating bool  // a beat is in flight
	// beatAt is when the last heartbeat was sent (ns), beatOK whether it
	// succeeded, firstAt when the first succeeded (ns, the store's clock);
	// listening: the channel's subscription was confirmed, last at
	// subscribedAt (ns): BeatDue.
	beatAt, firstAt, subscribedAt int64
	// restEnd (ns) is when the rest Rest last gave the runner ends (zero:
	// it gave an interval): a call made before then is beaten at once.
	restEnd           int64
	beatOK, listening bool
	// lastBeat is the store's time of the last heartbeat that succeeded
	// (µs): the node uses no grant an active window after it (the store
	// then counts it gone). gone holds the departures the node has read
	// (node → µs it left), for as long as a grant it held may last.
	lastBeat int64
	gone     map[string]int64
	// beatFailed is when the last heartbeat failed (ns; zero once one
	// succeeds): the node uses no grant until one succeeds. The others,
	// their asks failing, decide in an even split each (degraded): a node
	// that went on deciding in a large grant, a home above all, would
	// admit beside them what the store lent it.
	beatFailed int64
	// registryFault: the last heartbeat failed for the registry's keys
	// themselves (another type).
	registryFault bool
	// rejoined: a heartbeat found the node not in the fleet, whose last
	// successful heartbeat before was at rejoinAfter (µs), and the
	// registry has not been read whole since.
	rejoined    bool
	rejoinAfter int64
	// moved is how often this node's homes were called away before it
	// used them again, a moving average over the last few (homeEnded).
	moved   float64
	wake    func(Wake)
	pressed []local.Pressed
	named   map[string]struct{} // what was logged of which key (once)
	resets  map[keyLim]int64    // the latest reset heard or made of each key (µs), for an active window
	// resetsBefore: every reset before it (µs) is heard, or older than an
	// active window was when it was swept from resets; it never falls,
	// whatever Redis's clock does (a failover to a replica behind it).
	resetsBefore int64

	// grewFrom is the even split the node decided in before the fleet
	// last grew, while Tick has not yet looked for the keys that growth
	// pooled (0: nothing to look for); outgrown are the keys it found
	// and has yet to report, reportsPerRound of them at a time, once the
	// last ones (reporting) were answered and no sooner than reportNext
	// (ns) (setFleet).
	grewFrom   local.Share
	outgrown   []local.KeyLimit
	reporting  []*keyState // the last reports queued
	reportNext int64

	// cmu guards claims: the grant of each contested key, which the
	// engine asks for (Claimed) under a shard's lock.
	cmu    sync.RWMutex
	claims map[keyLim]int64

	stats shareStats
}

// shareStats are the protocol's counters.
type shareStats struct {
	ops, asks, joins, gives, renews, calls, waits, noRoom, lost, over, faults, expired, resets, outgrown atomic.Uint64
}

// Stats is a snapshot of the protocol's counters.
type Stats struct {
	// Ops counts every op handed to the store to send, a failed call's
	// again each time it is sent (also those an open breaker refuses at
	// once: round.Stats.KeysSent counts the ops the store answered). Asks
	// counts the requests short of their share that asked the fleet; Joins,
	// Gives and Renews count ops once each, by what they carried.
	Ops, Asks, Joins, Gives, Renews uint64
	Calls                           uint64 // calls this node made
	Waits, NoRoom                   uint64 // asks answered wait, and refused until later
	Lost, Over                      uint64 // contests the store had lost; grants the store had not accounted (degraded)
	Faults                          uint64 // ops, ledger entries and heartbeats the store refused for the key itself
	Expired                         uint64 // grants that lapsed before they were renewed
	Resets                          uint64 // keys another node reset, started afresh here
	Outgrown                        uint64 // keys decided alone, spent, pooled when the fleet grew: reported
	Contested                       int    // keys this node holds as contested
	Granted, Homes                  int    // keys it holds a grant of, and of them homes (the whole key, for the one node using it)
	Nodes                           int    // the fleet's size this node divides by
}

// New returns the protocol for engine eng (which must run in Asks mode).
func New(cfg Config, eng *local.Engine) *Shares {
	cfg = cfg.withDefaults()
	s := &Shares{cfg: cfg, eng: eng, log: cfg.Logger, keys: make(map[keyLim]*keyState), queued: make(map[*keyState]bool),
		claims: make(map[keyLim]int64), named: make(map[string]struct{}), resets: make(map[keyLim]int64)}
	s.fleet.window = share.Duration(cfg.ActiveWindow)
	s.fleet.fixed = cfg.FleetSize
	eng.SetClaimed(s.claimed)
	eng.SetFleet(cfg.FleetSize, 1)
	return s
}

// Wake is what a runner is woken for.
type Wake uint8

// The wakes.
const (
	// WakeOps: an op is ready to send (a request waits, or a call must be
	// answered): send it now rather than at the next round.
	WakeOps Wake = iota
	// WakeBeat: a call must reach the registry: beat now.
	WakeBeat
)

// SetWake sets the function told when something is ready to send at once
// rather than at the next round. It is called with s's lock held: it must
// not block or call s.
func (s *Shares) SetWake(f func(Wake)) { s.mu.Lock(); s.wake = f; s.mu.Unlock() }

// Settings returns the parameters every op carries, with the departures
// the node knows of.
func (s *Shares) Settings() share.Settings {
	set := share.Settings{Lease: share.Duration(s.cfg.Lease), CallWindow: share.Duration(2 * s.cfg.Interval),
		Cooldown: share.Duration(10 * s.cfg.Interval), Recovery: share.Duration(s.cfg.Recovery),
		HomeLease: share.Duration(s.cfg.HomeLease)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, at := range s.gone {
		set.Gone = append(set.Gone, share.Departure{Node: id, At: at})
	}
	slices.SortFunc(set.Gone, func(a, b share.Departure) int { return cmp.Compare(a.Node, b.Node) })
	return set
}

// Config returns the configuration in force.
func (s *Shares) Config() Config { return s.cfg }

// claimed is the engine's test, for a key it makes, of whether the key is
// contested and the share this node holds of it.
func (s *Shares) claimed(key string, lim limit.Limit) (local.Share, bool) {
	s.cmu.RLock()
	g, ok := s.claims[keyLim{key, lim}]
	s.cmu.RUnlock()
	return local.Share(min(g, share.One)), ok
}

func (s *Shares) setClaim(kl keyLim, g int64) {
	s.cmu.Lock()
	s.claims[kl] = g
	s.cmu.Unlock()
}

func (s *Shares) dropClaim(kl keyLim) {
	s.cmu.Lock()
	delete(s.claims, kl)
	s.cmu.Unlock()
}

// hold sets the share ks decides in, in the engine and for keys it makes.
// s.mu is held.
func (s *Shares) hold(ks *keyState, g int64) {
	s.setClaim(ks.kl, g)
	s.eng.Hold(ks.kl.key, ks.kl.lim, local.Share(g))
}

// state returns kl's state, making it (Even) if asked to. s.mu is held.
func (s *Shares) state(kl keyLim, make bool) *keyState {
	ks := s.keys[kl]
	if ks == nil && make {
		p, ok := share.ParamsOf(kl.lim)
		if !ok {
			return nil
		}
		ks = &keyState{kl: kl, params: p}
		s.keys[kl] = ks
		s.order = append(s.order, ks)
	}
	return ks
}

// to moves ks by ev (Transition) and carries out the effects that concern
// the key's grant, its claim and the engine; it returns the effects, for
// the caller to carry out the rest (the ops they ask for: Join, GiveBack,
// HomeLost, which depend on what waits on the key). s.mu is held.
func (s *Shares) to(ks *keyState, ev Event, in Input) Effect {
	fx := ks.move(ev, in)
	if fx&CountExpired != 0 {
		s.stats.expired.Add(1)
	}
	if fx&HoldNothing != 0 {
		s.hold(ks, 0)
	}
	if fx&Release != 0 {
		s.dropClaim(ks.kl)
		s.eng.Release(ks.kl.key, ks.kl.lim)
	}
	if fx&Join != 0 {
		s.enqueue(ks, wantJoin)
	}
	return fx
}

// forget drops ks if it has no reason to be kept. s.mu is held.
func (s *Shares) forget(ks *keyState) {
	if ks.gone {
		return // forgotten already: the key may have a new state since
	}
	if ks.state == Even && ks.idle() && !s.queued[ks] {
		delete(s.keys, ks.kl)
		ks.gone = true
	}
}

// enqueue marks ks as having an op to send. s.mu is held.
func (s *Shares) enqueue(ks *keyState, what intent) {
	ks.intents |= what
	if ks.faulted {
		return
	}
	if !s.queued[ks] {
		s.queued[ks] = true
		s.queue = append(s.queue, ks)
	}
	if s.wake != nil && what&(wantAsk|wantJoin|wantGive|wantMore|wantReport) != 0 {
		s.wake(WakeOps)
	}
}

// ---------------------------------------------------------------------------
// Requests the node's share cannot admit.

// Verdict is what a waiting request is told.
type Verdict uint8

// The verdicts.
const (
	// Retry: the key's share changed: decide again (AllowN), and if it is
	// still short, Short again.
	Retry Verdict = iota
	// Refuse: the fleet has no room for it until Until (Unix ns).
	Refuse
	// Expired: it waited AskWait without room.
	Expired
	// Unreachable: the store cannot be reached: decide it under the
	// fallback.
	Unreachable
	// Admitted: the store admitted it from the fleet's pool (the node
	// holds no share it could admit it in).
	Admitted
)

// Waiter is a request waiting for room. Done is closed when its Verdict is
// set (and Notify, if set, is called then, with s's lock held).
type Waiter struct {
	n, at    int64 // weight, and when it was made (µs)
	deadline int64
	verdict  Verdict
	until    int64
	done     chan struct{}
	notify   func(*Waiter)
	settled  bool
}

// Done is closed once the waiter has its verdict.
func (w *Waiter) Done() <-chan struct{} { return w.done }

// Verdict returns the waiter's verdict and, for Refuse, until when (ns);
// for Admitted, when the store admitted it (ns, the store's clock).
func (w *Waiter) Verdict() (Verdict, int64) { return w.verdict, w.until }

func (w *Waiter) settle(v Verdict, until int64) {
	if w.settled {
		return
	}
	w.settled, w.verdict, w.until = true, v, until
	if w.done != nil {
		close(w.done)
	}
	if w.notify != nil {
		w.notify(w)
	}
}

// Short is told of a request of weight n for (key, lim) that the node's
// share could not admit at now (ns; the engine returned ErrShort), made at
// asked (ns; now, unless it was short before and is back after a wait). It
// returns refuse and until when the fleet is known to have no room before
// until (ns); otherwise a Waiter that tells the request what to do within
// deadline (ns; now + AskWait, or the caller's earlier one). notify, if not
// nil, is called with the settled waiter under s's lock (the simulation's
// hook); a caller that blocks selects on Waiter.Done instead.
func (s *Shares) Short(now, asked int64, key string, lim limit.Limit, n, deadline int64, notify func(*Waiter)) (w *Waiter, refuse bool, until int64) {
	us := share.Micros(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left {
		return nil, true, now // the node closes: it asks for nothing more
	}
	ks := s.state(keyLim{key, lim}, true)
	if ks == nil {
		return nil, true, now // not shareable: the caller refuses it (validated before)
	}
	ks.lastUse = us
	ks.maxWeight = max(ks.maxWeight, n)
	if ks.deniedUntil > us && (share.Nanos(ks.deniedUntil) > deadline || ks.deniedUntil-us > share.Duration(margin)) {
		// No room in the fleet now, nor within the margin its clock is
		// known to: the exact limiter would refuse it too.
		ks.refused++
		ks.refusedAt = us
		return nil, true, share.Nanos(ks.deniedUntil)
	}
	if ks.deniedUntil > us {
		ks.retryAt = max(ks.retryAt, ks.deniedUntil) // room then: it waits, and decides again
	} else {
		ks.deniedUntil = 0
	}
	if s.cfg.AskWait < 0 || deadline <= now {
		s.forget(ks)
		return nil, true, now
	}
	if ks.deniedUntil == 0 && s.overLimit(ks, us) {
		// Over its limit lately: refused alone, as the fleet had no room
		// the last time the node asked, and an op asks for room for the
		// next request (growth, which the node decides in from memory): a
		// key over its limit costs its requests no wait on the store.
		// Counted in refused, as a refusal until the store's no-room ends
		// is: a key refused over and over asks less and less often.
		ks.refused++
		ks.refusedAt = us
		if ks.op == nil && ks.retryAt <= us {
			s.enqueue(ks, wantMore)
		}
		return nil, true, now
	}
	w = &Waiter{n: n, at: share.Micros(min(asked, now)), deadline: deadline, notify: notify}
	if notify == nil {
		w.done = make(chan struct{})
	}
	ks.waiters = append(ks.waiters, w)
	if !ks.waiting {
		ks.waiting = true
		s.waiting = append(s.waiting, ks)
	}
	if ks.retryAt <= us {
		s.enqueue(ks, wantAsk)
	}
	s.stats.asks.Add(1)
	return w, false, 0
}

// overLimit reports whether a request of ks short of the node's share at
// us is refused alone while an op asks for room for the next one: the store
// said the fleet had no room within the last overFor intervals (the nodes
// holding grants needed theirs), no request of the key waits here, the
// key is not pooled, and the node's demand holds a request of its own, so
// that the op grows its share (a demand that does not is served by the
// pool request by request, and a request must wait for that). A pooled
// key's room is all in the pool, and comes when the store said: refused
// alone, the first request after it was the one an exact limiter admits
// (per-client keys of 1/s over 6 nodes, at random: 260 requests below an
// exact limiter in 10 s, against 23-50 without the rule). s.mu is held.
func (s *Shares) overLimit(ks *keyState, us int64) bool {
	if ks.overAt == 0 || us-ks.overAt >= overFor*share.Duration(s.cfg.Interval) || len(ks.waiters) > 0 ||
		pooledKey(ks.params, s.fleet.size()) {
		return false
	}
	s.updateRate(ks, us) // its demand as of now: the op build makes will read the same
	return s.rateShare(ks) >= s.oneShare(ks)
}

// Abandon removes w from its key's waiters (its caller gave up: a context
// that ended).
func (s *Shares) Abandon(key string, lim limit.Limit, w *Waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.keys[keyLim{key, lim}]
	if ks == nil {
		return
	}
	ks.waiters = slices.DeleteFunc(ks.waiters, func(x *Waiter) bool { return x == w })
	w.settle(Expired, 0)
	s.forget(ks)
}

// release settles every waiter of ks with v. s.mu is held.
func release(ks *keyState, v Verdict, until int64) {
	ws := ks.waiters
	ks.waiters = nil
	for _, w := range ws {
		w.settle(v, until)
	}
}

// ---------------------------------------------------------------------------
// The heartbeat.

// fleetView is the fleet's size as this node divides by it: the most nodes
// seen within the active window, and the configured floor.
type fleetView struct {
	window int64 // µs
	fixed  int
	seen   []fleetSeen
}

type fleetSeen struct {
	at    int64
	nodes int
}

// observe records that the fleet had nodes at µs now, and returns the size
// to divide by.
func (f *fleetView) observe(now int64, nodes int) int {
	f.seen = append(f.seen, fleetSeen{now, nodes})
	keep := f.seen[:0]
	for _, x := range f.seen {
		if x.at > now-f.window {
			keep = append(keep, x)
		}
	}
	f.seen = keep
	return f.size()
}

// size is the fleet's size to divide by.
func (f *fleetView) size() int {
	n := max(f.fixed, 1)
	for _, x := range f.seen {
		n = max(n, x.nodes)
	}
	return n
}

// QuietBeat is how often a quiet node beats (BeatDue), unless its interval
// is longer or its active window shorter than four of them.
const QuietBeat = 200 * time.Millisecond

// BeatDue reports whether the round at now (ns) should beat. It should,
// every interval, unless the node is quiet:
//   - it has read the registry whole and its last heartbeat succeeded;
//   - it hears the channel: its subscription was confirmed (Subscribed),
//     not within the last call window (two intervals: what was published
//     while it was not subscribed is read from the registry meanwhile);
//   - it started more than an active window ago (the fleet it started with
//     is still forming before that: it learns each node that joins from
//     the channel, and from its heartbeats should a notice be lost);
//   - nothing is to be sent to the registry or the store, no request waits,
//     and as of the last sweep no key holds a grant or has an op or an
//     intent (a contest it holds nothing of needs no heartbeat: a call on
//     it asks nothing of this node, and should it decide the key again,
//     its op reads the contest);
//   - its engine made no decision since about its last heartbeat.
//
// A quiet node beats every QuietBeat (or interval, if longer), at most a
// quarter of the active window apart: its heartbeat then only keeps it in
// the fleet and backs up the channel by which calls and joins reach it, so
// an idle node costs Redis about five heartbeats a second whatever its
// interval. The first decision after a quiet spell makes the next round
// beat again.
func (s *Shares) BeatDue(now int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.quiet(now) {
		return true
	}
	return now-s.beatAt >= s.quietGap()
}

// Rest reports how long the runner may sleep from now (ns) before its next
// round: an interval, unless the node is quiet (BeatDue): then until its
// next quiet beat. A node at rest wakes a few times a second, not every
// interval; the first decision after its rest is seen when it next wakes,
// and the calls and asks it makes wake the runner at once.
func (s *Shares) Rest(now int64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.quiet(now) {
		s.restEnd = 0
		return s.cfg.Interval
	}
	d := time.Duration(min(max(s.beatAt+s.quietGap()-now, int64(s.cfg.Interval)), s.quietGap()))
	s.restEnd = now + int64(d)
	return d
}

// quietGap is how far apart a quiet node beats (ns): QuietBeat, at most a
// quarter of the active window, at least an interval.
func (s *Shares) quietGap() int64 {
	return max(int64(s.cfg.Interval), min(int64(QuietBeat), int64(s.cfg.ActiveWindow)/4))
}

// quiet reports whether the node is quiet at now (BeatDue). s.mu is held.
func (s *Shares) quiet(now int64) bool {
	interval := int64(s.cfg.Interval)
	if !s.read || s.more || !s.beatOK || now-s.firstAt < int64(s.cfg.ActiveWindow) ||
		!s.listening || now-s.subscribedAt < 2*interval ||
		len(s.calls) > 0 || len(s.aloud) > 0 || len(s.queue) > 0 || len(s.waiting) > 0 || s.busy > 0 ||
		len(s.outgrown) > 0 {
		return false
	}
	// The engine's clock may trail this one by the offset's last move: a
	// decision within an interval before the last beat counts as after it.
	return s.eng.LastActive() < s.beatAt-interval
}

// NextBeat returns the heartbeat to send now, with the calls and renewals
// queued for the registry, or nil when one is in flight.
func (s *Shares) NextBeat(now int64) *share.Beat {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.beating {
		return nil
	}
	s.beating, s.beatAt = true, now
	if n := min(len(s.aloud), registryPage-len(s.calls)); n > 0 {
		s.calls = append(s.calls, s.aloud[:n]...)
		s.aloud = s.aloud[n:]
	}
	// A registry page of entries at most (about 7 µs of Redis each): a beat
	// carrying thousands would outlast RedisTimeout and, sent again whole
	// with what came since, never succeed. Calls and resets first (requests
	// wait on a call, AskWait at most), then registrations and renewals,
	// each in the order they came (the registry keeps the latest of each
	// field, whatever the order); the rest go with the next beats (the node
	// is not quiet while any wait). A new slice every beat: a beat
	// abandoned at its timeout may still be read by its call.
	ordered := make([]share.Contest, 0, len(s.calls))
	for _, c := range s.calls {
		if urgentEntry(c) {
			ordered = append(ordered, c)
		}
	}
	for _, c := range s.calls {
		if !urgentEntry(c) {
			ordered = append(ordered, c)
		}
	}
	n := min(len(ordered), registryPage)
	b := &share.Beat{From: s.from, Limit: registryPage, Contests: ordered[:n:n],
		GoneKeep: share.Duration(s.cfg.HomeLease + s.cfg.ActiveWindow)}
	if !s.read {
		b.From = 0
	}
	s.calls = nil
	if n < len(ordered) {
		s.calls = ordered[n:]
	}
	return b
}

// urgentEntry reports whether registry entry c is a call or a reset, which
// goes before registrations and renewals.
func urgentEntry(c share.Contest) bool { return c.CallAt != 0 || c.Reset != 0 }

// BeatDone applies the reply to heartbeat b, sent at sent and answered at
// now (ns), or its failure.
func (s *Shares) BeatDone(b *share.Beat, r *share.BeatReply, err error, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beating, s.beatOK = false, err == nil
	started := s.firstAt != 0
	if err == nil && s.firstAt == 0 {
		s.firstAt = now // the store's clock, as the reply just mapped it
	}
	if err != nil {
		s.calls = append(slices.Clone(b.Contests), s.calls...) // sent again with the next beat
		if remote.IsKeyFault(err) {
			// The registry's keys hold another type: no node's heartbeat
			// succeeds, nobody can be counted gone, and nothing this node
			// holds can be taken from it. Its grants stay good, also after
			// an earlier beat that simply failed (this one reached Redis),
			// if the node's last good heartbeat is within an active window:
			// one older may have let another node count it gone before
			// the registry's keys were taken, and have its grants.
			s.registryFault = true
			if s.beatFailed != 0 && share.Micros(now) < s.lastBeat+share.Duration(s.cfg.ActiveWindow)-s.leaseMargin() {
				s.beatFailed = 0
				s.nextSweep = 0 // good again at the next Tick
			}
			return
		}
		if s.beatFailed == 0 {
			s.beatFailed = now
		}
		if v := share.Micros(now); v < s.valid {
			s.valid = v
			s.eng.SetValidUntil(now)
		}
		return
	}
	if s.beatFailed != 0 {
		s.nextSweep = 0 // the grants are good again: at the next Tick, not the next quiet sweep
	}
	s.beatFailed, s.registryFault = 0, false
	before := s.lastBeat
	s.lastBeat = max(s.lastBeat, r.Now)
	if r.New && started {
		// The node was not in the fleet: the store counted it gone (the
		// others may have its grants already), or restarted empty (its
		// contests are rebuilt from its grants). It uses none until it has
		// read the registry whole, which says which (its own departure).
		s.rejoined, s.rejoinAfter = true, before
		if s.cfg.Node == "" {
			s.dropGrants()
		} else {
			s.registerAloud()
		}
		if v := share.Micros(now) - 1; v < s.valid {
			s.valid = v
			s.eng.SetValidUntil(share.Nanos(v))
		}
	}
	keep := share.Duration(s.cfg.HomeLease + s.cfg.ActiveWindow)
	for _, g := range r.Gone {
		if g.Node == s.cfg.Node && s.cfg.Node != "" {
			if s.rejoined && g.At > s.rejoinAfter {
				s.dropGrants() // counted gone since its last heartbeat
			}
			continue
		}
		if s.gone == nil {
			s.gone = make(map[string]int64)
		}
		s.gone[g.Node] = max(s.gone[g.Node], g.At)
	}
	if !r.More && s.rejoined {
		s.rejoined = false
		s.nextSweep = 0 // its grants, if it kept them, are good again at the next Tick
	}
	for id, at := range s.gone {
		if at < r.Now-keep {
			delete(s.gone, id) // every grant it held has lapsed
		}
	}
	s.setFleet(s.fleet.observe(r.Now, r.Nodes))
	first := !s.read
	for _, c := range r.Changes {
		s.heard(c, first, r.Now)
	}
	s.from, s.more = r.Next, r.More
	if !r.More {
		s.read = true
	}
}

// registerAloud queues, for the next heartbeats (a page each), a
// registration every node reads of each contest this node holds a grant of
// whose key is registered quietly (quietKey). The node is new to the fleet:
// if Redis restarted empty, the registry lost the contest's entry with it.
// Another node's quiet registration of the key's next contest would then
// replace nothing, and this node, deciding in its grant of the lost one,
// would never read it. Registered aloud, that contest's entry is in the
// registry again: the later one replaces it (read), or, should it come
// first, is stamped when this one comes after it. s.mu is held.
func (s *Shares) registerAloud() {
	s.aloud = s.aloud[:0] // what a page did not send yet is made again
	for _, ks := range s.orderedKeys() {
		if ks.state.holds() && quietKey(ks.params) {
			s.aloud = append(s.aloud, share.Contest{Key: ks.kl.key, Limit: ks.kl.lim, Epoch: ks.epoch, Expiry: max(ks.expiry, ks.leaseEnd)})
		}
	}
}

// homeEnded tallies a home's fate: moved, called away before the node used
// it again (the demand moves between the nodes), or not (used, renewed).
// s.mu is held.
func (s *Shares) homeEnded(moved bool) {
	x := 0.0
	if moved {
		x = 1
	}
	s.moved += (x - s.moved) / 5
}

// dropGrants stops the node using every grant it holds: the store may
// have taken them back. s.mu is held.
//
// An op built before (a renewal that failed, say) would say the node still
// holds what it did, and the store, which may have let another node have
// it since, would believe it (a node that decided degraded): one not sent
// since it failed is made again from what the node holds now; one in
// flight has its answer's grant dropped too, and an op gives it back.
func (s *Shares) dropGrants() {
	for _, ks := range s.orderedKeys() {
		s.to(ks, Lapsed, Input{})
		switch {
		case ks.op != nil && ks.retry:
			ks.op, ks.retry = nil, false
			s.enqueue(ks, wantIdle)
		case ks.op != nil:
			ks.dropped = true
		}
	}
}

// Heard applies a call published on the fleet's channel (remote's
// pub/sub): the fast path by which a call reaches the nodes, ahead of their
// next heartbeat, which reads it from the registry all the same.
func (s *Shares) Heard(c share.Contest, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.read {
		return // the node's first reading of the registry comes first
	}
	s.heard(c, false, share.Micros(now))
}

// Joined applies a node's join published on the fleet's channel: the fleet
// had nodes at at (µs, the store's clock). The node divides by that many at
// once, rather than at its next heartbeat: a quiet node beats seldom. A
// notice only ever grows the fleet: after Redis restarted empty the nodes
// join again one by one, and a node whose breaker is still open (it
// decides in one over the fleet, and its heartbeats wait) must not take
// their count so far for the fleet. member is the node that joined ("" from
// an earlier release): a degraded node hearing another's join divides by
// one more while degraded (local.Engine.SetDegradedFleet).
func (s *Shares) Joined(nodes int, at int64, member string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if nodes > s.fleet.size() {
		s.setFleet(s.fleet.observe(at, nodes))
	}
	if member != "" && member != s.cfg.Node && s.eng.Degraded() {
		// Heard while this node cannot reach Redis: its heartbeats fail,
		// and Redis may have lost its entry (restarted empty), so the
		// joiner's count may leave it out, and the joiner decides in one
		// over that count. While degraded this node divides by one more.
		s.eng.SetDegradedFleet(nodes + 1)
	}
}

// setFleet makes the engine divide by the nodes seen, n. When the fleet
// grows, a key this node decided alone in its even split may be pooled now:
// no node decides it alone any more, and the first op on it makes its
// contest. The node reports each such key it has spent (its shadow), so
// that the contest starts as spent, or, should a new node have asked first,
// is charged with it: else that node finds the whole limit in the pool
// while this one has spent it. Tick looks for the keys (Engine.Outgrown
// reads every key the engine holds, outside s.mu) and sends the reports a
// few at a time. s.mu is held.
func (s *Shares) setFleet(n int) {
	from := s.eng.DefaultShare()
	s.eng.SetFleet(s.cfg.FleetSize, n)
	if s.eng.DefaultShare() >= from || s.left {
		return
	}
	s.grewFrom = max(s.grewFrom, from)
	if s.wake != nil {
		s.wake(WakeOps) // a node at rest ticks now, not at its next quiet beat
	}
}

// reportsPerRound is how many of the keys the fleet's growth pooled a node
// reports an interval: a node that decided many alone reports them over a
// few rounds, beside its asks, rather than in calls that outlast the
// breaker's timeout.
const reportsPerRound = 100

// findOutgrown looks for the keys the fleet's growth pooled, if it grew
// since it last looked: outside s.mu, which every request short of its
// share takes, since it reads every key the engine holds.
func (s *Shares) findOutgrown(now int64) {
	s.mu.Lock()
	from := s.grewFrom
	s.grewFrom = 0
	s.mu.Unlock()
	if from == 0 {
		return
	}
	found := s.eng.Outgrown(now, from, nil)
	slices.SortFunc(found, func(a, b local.KeyLimit) int { // one order, for the simulation's replays
		if c := cmp.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Limit.String(), b.Limit.String())
	})
	s.mu.Lock()
	s.outgrown = append(s.outgrown, found...)
	s.mu.Unlock()
}

// queueReports queues the reports of up to reportsPerRound keys the fleet's
// growth pooled: once the last ones were answered, at most once an
// interval, and not while the node is degraded (the store cannot be
// reached: reports queued then would all go at once when it answers
// again). It returns when to look again (0: nothing left). s.mu is held.
func (s *Shares) queueReports(now int64) int64 {
	if len(s.outgrown) == 0 || s.left {
		s.outgrown, s.reporting = nil, nil
		return 0
	}
	next := now + int64(s.cfg.Interval)
	if now < s.reportNext {
		return s.reportNext
	}
	if s.eng.Degraded() {
		return next
	}
	for _, ks := range s.reporting {
		if !ks.gone && (ks.op != nil || s.queued[ks]) {
			return next // the last reports are not all answered: they are sent again first
		}
	}
	n := min(len(s.outgrown), reportsPerRound)
	s.reporting = s.reporting[:0]
	for _, o := range s.outgrown[:n] {
		if ks := s.state(keyLim{o.Key, o.Limit}, true); ks != nil && ks.state == Even {
			s.stats.outgrown.Add(1)
			s.enqueue(ks, wantReport)
			s.reporting = append(s.reporting, ks)
		}
	}
	s.outgrown = s.outgrown[n:]
	if len(s.outgrown) == 0 {
		s.outgrown, s.reporting = nil, nil
		return 0
	}
	s.reportNext = next
	return next
}

// StartSettle is how long a node that starts without FleetSize waits after
// its first heartbeat, before it decides anything, to beat again: a fleet
// started together is still forming, and each node that read the fleet
// before the others joined would otherwise spend an even split of the
// fleet it saw (one over one, one over two...), together up to the limit
// times the harmonic number of the fleet's size. Two intervals, at most
// 100 ms: the nodes started with it have beaten by then. Zero with
// FleetSize: the node divides by it from the start.
func (s *Shares) StartSettle() time.Duration {
	if s.cfg.FleetSize > 0 {
		return 0
	}
	return min(2*s.cfg.Interval, 100*time.Millisecond)
}

// Subscribed records that the node's subscription to the fleet's channel
// was confirmed at now (ns): at first, or again after a dropped connection,
// whose gap lost what was published meanwhile. Until the first, and for a
// call window after each, the node beats every interval (BeatDue), so that
// it reads from the registry what the channel did not bring.
func (s *Shares) Subscribed(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listening, s.subscribedAt = true, now
}

// Listening reports whether the node's subscription to the fleet's
// channel was ever confirmed (Subscribed).
func (s *Shares) Listening() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.listening }

// Pending reports whether some key has an op to send, or one in flight
// (NextOps has something to look at): a node at rest has none, and its
// runner need not wake its sender.
func (s *Shares) Pending() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.queue) > 0 }

// Urgent reports whether an op to send has a request waiting on it: an
// ask, or an answer to a call (the asker's request waits on it). The
// runner sends those at once, and may gather the others (renewals, growth
// before a request is short, idle keys given back) into fewer calls.
func (s *Shares) Urgent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ks := range s.queue {
		if (ks.op == nil || ks.retry) && (len(ks.waiters) > 0 || ks.intents&(wantAsk|wantGive|wantJoin) != 0) {
			return true
		}
	}
	return false
}

// Waiting reports whether a request waits for room on some key.
func (s *Shares) Waiting() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.waiting) > 0 }

// More reports whether the registry has more changes to read: the runner
// beats again at once.
func (s *Shares) More() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.more }

// heard processes one registry entry. On the node's first reading every
// contest is taken as one it holds nothing of: it has never decided a key
// (New beats before it decides). s.mu is held.
func (s *Shares) heard(c share.Contest, first bool, now int64) {
	kl := keyLim{c.Key, c.Limit.Canonical()}
	if c.Reset > 0 {
		s.resetHeard(kl, c.Reset, first, now)
	}
	if c.Epoch == 0 {
		return // a reset alone
	}
	ks := s.state(kl, true)
	if ks == nil {
		return
	}
	if c.Epoch > ks.regEpoch {
		ks.regEpoch, ks.registered = c.Epoch, c.Expiry
	} else if c.Epoch == ks.regEpoch {
		ks.registered = max(ks.registered, c.Expiry)
	}
	switch {
	case first && ks.state == Even:
		ks.epoch, ks.expiry, ks.callSeen = c.Epoch, c.Expiry, c.CallAt
		s.to(ks, Announced, Input{})
		if !pooledKey(ks.params, s.fleet.size()) {
			// The contest may hold an even split back for this node (its
			// creator counted it: FleetSize), and wait for its join: it
			// joins holding nothing (its op names no epoch, as a join
			// does), and the split goes back to the pool.
			ks.epoch = 0
			s.enqueue(ks, wantJoin)
		}
	case ks.state == Even && pooledKey(ks.params, s.fleet.size()) && ks.op == nil && len(ks.waiters) == 0:
		// A pooled key this node holds nothing of: nothing to report, and
		// a pooled contest waits for no join.
		ks.epoch, ks.expiry, ks.callSeen = c.Epoch, c.Expiry, c.CallAt
		s.to(ks, Announced, Input{})
	case ks.state == Even || c.Epoch > ks.epoch:
		// A contest this node has not joined (its start, or one that began
		// while it held an earlier one): it joins with what it holds.
		ks.joinEpoch, ks.callSeen = c.Epoch, c.CallAt
		ks.expiry = max(ks.expiry, c.Expiry)
		s.to(ks, Contest, Input{})
	case c.Epoch == ks.epoch:
		ks.expiry = max(ks.expiry, c.Expiry)
		switch {
		case c.CallAt <= ks.callSeen:
		case ks.op != nil:
			// The op in flight may be the one this call answers (the store
			// publishes it before its answer arrives): heard again once
			// the op is answered, when the node knows its own calls.
			if c.CallAt > ks.heardLater {
				ks.heardLater, ks.heardEpoch = c.CallAt, c.Epoch
			}
		default:
			s.calledAt(ks, c.CallAt, now)
		}
	}
}

// calledAt processes a call at (µs) heard on ks's contest: another node's
// asks every holder to give back what it spares. s.mu is held.
func (s *Shares) calledAt(ks *keyState, at, now int64) {
	ks.callSeen = at
	if at == ks.called {
		return // its own
	}
	fx := s.to(ks, Called, Input{})
	// A pooled key's home gives it all back: its demand has spread, and the
	// pool serves each node's requests in turn (a grant it kept would hold
	// a pooled key whole here).
	ks.yield = fx&HomeLost != 0 && pooledKey(ks.params, s.fleet.size())
	if fx&HomeLost != 0 {
		s.updateRate(ks, now)
		s.homeEnded(ks.lastUse <= ks.homeAt) // unused since it began: the demand moves
	}
	if fx&GiveBack != 0 && len(ks.waiters) == 0 {
		s.enqueue(ks, wantGive) // with an op in flight, sent after its answer
	}
}

// heardSince processes the call ks heard while its op was in flight, now
// that the op is answered: unless it was this node's own, or the contest
// changed meanwhile. s.mu is held.
func (s *Shares) heardSince(ks *keyState, now int64) {
	at, epoch := ks.heardLater, ks.heardEpoch
	ks.heardLater, ks.heardEpoch = 0, 0
	if at > ks.callSeen && epoch == ks.epoch {
		s.calledAt(ks, at, now)
	}
}

// resetHeard starts kl afresh in the engine, once per reset at (µs), unless
// this node made it (it started afresh then), reads the registry for the
// first time (it holds nothing from before), or the reset is older than an
// active window (it heard it then, or was not in the fleet). s.mu is held.
func (s *Shares) resetHeard(kl keyLim, at int64, first bool, now int64) {
	if at <= s.resetHeardBy(kl, now) {
		// Heard already, or older than an active window: the registry
		// keeps a contest's last reset on its entry for the contest's
		// life and hands it back with every change to it (every call),
		// long after this node swept its own record of it. Applied again,
		// each node restarted the key on every call: the fleet admitted
		// half as much again as the limit.
		return
	}
	s.resets[kl] = at
	s.forgive(kl)
	if !first {
		s.eng.Restart(share.Nanos(now), kl.key, kl.lim)
		s.stats.resets.Add(1)
		// Another node's call since the reset was answered (or is about to
		// be) with the state before it: spent, nothing to spare. It is
		// answered again, with the fresh state: else the asker is refused
		// while this node holds the key fresh (TestResetAsync: the
		// resetting node refused, the home that had answered its call
		// admitting the fresh burst alone).
		// (A join on its way to the store is such an answer too: its
		// reply makes the split it kept its grant.)
		if ks := s.keys[kl]; ks != nil && (ks.grant > 0 || ks.op != nil) && ks.callSeen >= at && ks.callSeen != ks.called && len(ks.waiters) == 0 {
			s.enqueue(ks, wantGive)
		}
	}
}

// resetHeardBy is what an op of kl made at us says of the resets it heard
// (share.Op.ResetHeard): the latest reset of kl it heard or made, and every
// reset older than an active window (a node in the fleet reads the
// registry several times a window: it has heard of them, or, cut off for
// longer, it sends its state as it is), as of the latest sweep too, so
// that a step back of Redis's clock never makes an op say it missed a
// reset it heard (the store would take its state, spent since, as fresh).
// s.mu is held.
func (s *Shares) resetHeardBy(kl keyLim, us int64) int64 {
	return max(s.resets[kl], s.resetsBefore, us-share.Duration(s.cfg.ActiveWindow))
}

// forgive forgets that the fleet had no room for kl: it was reset. s.mu is
// held.
func (s *Shares) forgive(kl keyLim) {
	if ks := s.keys[kl]; ks != nil {
		ks.deniedUntil, ks.refused, ks.retryAt, ks.refusedAt, ks.overAt = 0, 0, 0, 0, 0
	}
}

// Took gives back the demand a take of the engine's spend carried (the
// ledger's, Async.sendLedger): the keys the protocol follows keep counting
// it in their rate.
func (s *Shares) Took(spend []local.Spend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range spend {
		if ks := s.keys[keyLim{t.Key, t.Limit}]; ks != nil && t.Hits > 0 {
			ks.hits += t.Hits
			ks.lastUse = max(ks.lastUse, share.Micros(t.Since))
		}
	}
}

// Reset starts (key, lim) afresh on this node at now (ns), the store's
// state of it having been reset at at (ns; remote.Store.ResetShares), and
// sends the reset to every other node through the registry with the next
// heartbeat, at once: each starts the state it holds afresh when it hears.
func (s *Shares) Reset(now int64, key string, lim limit.Limit, at int64) {
	kl := keyLim{key, lim}
	s.mu.Lock()
	defer s.mu.Unlock()
	us := share.Micros(at)
	s.resets[kl] = max(s.resets[kl], us)
	s.forgive(kl)
	s.eng.Restart(now, key, lim)
	s.calls = append(s.calls, share.Contest{Key: key, Limit: lim, Expiry: us + share.Duration(s.cfg.ActiveWindow), Reset: us})
	if s.wake != nil {
		s.wake(WakeBeat)
	}
}

// ---------------------------------------------------------------------------
// Ops.

// NextOps returns the ops to send now, at most max (zero: all), and marks
// them in flight; nil when there are none. Each key has at most one op in
// flight; an op whose last attempt failed is sent again as it was.
func (s *Shares) NextOps(now int64, limit int) []share.Op {
	us := share.Micros(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	var ops []share.Op
	rest := s.queue[:0]
	for _, ks := range s.queue {
		if limit > 0 && len(ops) >= limit {
			rest = append(rest, ks)
			continue
		}
		if ks.op != nil && !ks.retry {
			rest = append(rest, ks) // in flight: after its answer
			continue
		}
		if ks.op == nil {
			op, ok := s.build(ks, now, us)
			if !ok {
				delete(s.queued, ks)
				s.forget(ks)
				continue
			}
			ks.op = op
		}
		ks.retry = false
		delete(s.queued, ks)
		ops = append(ops, *ks.op)
	}
	clear(s.queue[len(rest):])
	s.queue = rest
	s.stats.ops.Add(uint64(len(ops)))
	return ops
}

// build makes ks's next op from its intents, and shrinks the key in the
// engine to what the op keeps: from now on the node decides in it. s.mu is
// held.
func (s *Shares) build(ks *keyState, now, us int64) (*share.Op, bool) {
	in := ks.intents
	ks.intents = 0
	defer func() { ks.yield = false }()
	if s.left {
		// The node closes: what it queued before asks for nothing now.
		// A join or a report still says what the node held, and the
		// op gives it all back.
		in = in&(wantJoin|wantReport) | wantLeave
	}
	if ks.state == Even && in&(wantJoin|wantAsk|wantMore|wantReport) == 0 {
		return nil, false // nothing to say of a key it holds no contest of
	}
	snap, ok := s.eng.Snapshot(now, ks.kl.key, ks.kl.lim)
	if !ok {
		return nil, false
	}
	held, st, shadow := snap.Held, snap.State, snap.Shadow
	want := ks.want()
	if ks.params.Kind == share.Meter && len(ks.waiters) > 0 {
		want = ks.waiters[0].n // a meter passes one request at a time
	}
	if want == 0 && in == wantAsk {
		return nil, false // the waiters are gone
	}
	if in&wantMore != 0 {
		want = max(want, 1) // room for one more, and growth toward its demand
	}
	s.updateRate(ks, us)
	keep := int64(held)
	switch {
	case in&wantLeave != 0:
		keep, want = 0, 0
	case want > 0:
		// Requests wait: keep everything.
	case in&wantIdle != 0 && ks.lastUse < us-3*share.Duration(s.cfg.Interval):
		keep = 0 // idle here: all of it back to the pool
	case in&wantGive != 0 && ks.yield:
		keep = 0
	case in&(wantJoin|wantGive) != 0:
		keep = min(keep, s.spare(ks, st, us))
	case in&wantRenew != 0 && ks.lastUse <= us-max(share.Duration(s.cfg.Lease), s.idleAfter(ks)):
		keep = 0 // unused for a whole lease (a home: half its lease): back to the pool
	case in&wantRenew != 0 && ks.state == Home:
		// A home keeps everything: nobody else wants any of it.
		s.homeEnded(false) // used, and not called away
	case in&wantRenew != 0:
		keep = min(keep, max(s.need(ks), s.spare(ks, st, us)))
	}
	if ks.state == Home && keep == 0 && in&(wantIdle|wantRenew) != 0 && ks.lastUse > ks.homeAt {
		s.homeEnded(false) // used here, then left: a home that stayed
	}
	if in&^wantGive == 0 && held == 0 {
		return nil, false // a call it holds nothing of
	}
	need := int64(0)
	if want > 0 || in&(wantRenew|wantMore) != 0 && keep > 0 && in&wantGive == 0 {
		// It grows toward its demand only when it asks or is in use, and
		// not in an answer to a call: the store would hand a node that
		// alone holds grants back what it gives.
		need = max(s.need(ks), keep)
	}
	// A node whose demand could not hold one request of its own is served
	// by the pool rather than grown: a share it took would sit spent here,
	// refilling at its own small rate, while others need its room.
	serve := want > 0 && keep == 0 && (s.rateShare(ks) < s.oneShare(ks) || wholeUnit(ks.params))
	halfHome := share.Duration(s.cfg.HomeLease) / 2
	if serve && us-max(ks.callSeen, ks.called) >= halfHome && (s.moved < 0.5 || ks.servedAt > 0 && us-ks.servedAt < halfHome) {
		// Served, it grows by nothing, unless nobody else asked for the
		// key for half a home lease: then the whole key is its home. Not
		// where a call was made or heard meanwhile: demand that moves
		// between the nodes would be called from one home to the next, a
		// round trip each time, where the pool serves it in one. And,
		// where most homes this node made were called away before it used
		// them again (round-robin, random), not with the key's first
		// request here, only with its second (the store makes no home
		// where another node asked in between).
		need = share.One
	} else if serve {
		need = 0
	}
	s.seq = max(s.seq+1, us) // grows across restarts of the node too: the store answers a seq it has seen as it did
	asked := int64(0)        // the latest of the requests waiting: what the pool admits counts once they all were made
	each := int64(0)         // the weight of each request waiting, if they weigh the same
	for i, w := range ks.waiters {
		asked = max(asked, w.at)
		switch {
		case i == 0:
			each = w.n
		case w.n != each:
			each = -1
		}
	}
	op := &share.Op{Key: ks.kl.key, Limit: ks.kl.lim, Epoch: ks.epoch, Held: int64(held), Keep: keep, State: st, At: us,
		Want: want, AskedAt: asked, Need: need, Fleet: s.fleet.size(), Pooled: pooledKey(ks.params, s.fleet.size()),
		Join: in&wantJoin != 0, Leave: in&wantLeave != 0, Serve: serve, Each: max(each, 0), Seq: s.seq, Owed: snap.Owed, Applied: ks.applied,
		Full: -1, Shadow: shadow.Level, ShadowSince: share.Micros(shadow.Since), ResetHeard: s.resetHeardBy(ks.kl, us)}
	if shadow.Full >= 0 {
		op.Full = share.Micros(shadow.Full)
	}
	if ks.state == Even {
		op.Epoch = 0
	} else if ks.shortOfRoom(us) {
		op.Heard = ks.callSeen // it answers the calls heard so far with nothing to spare
	}
	if keep < int64(held) {
		s.hold(ks, keep) // it decides in what it keeps from now on
	}
	switch {
	case in&wantJoin != 0:
		s.stats.joins.Add(1)
	case in&wantGive != 0:
		s.stats.gives.Add(1)
	case in&wantRenew != 0:
		s.stats.renews.Add(1)
	}
	return op, true
}

// quietKey reports whether a contest of a key of p is registered quietly
// (share.Contest.Quiet): no node holds an even split of it in any fleet, one
// request weighing more than half the limit (a per-client key of burst 1,
// say), so the other nodes, which would only note its registration, do not
// read it (unless it replaces an earlier contest). Pooled in a fleet of
// two, a key is pooled in every larger one.
func quietKey(p share.Params) bool { return pooledKey(p, 2) }

// pooledKey reports whether a key of p has no even split in a fleet of n.
func pooledKey(p share.Params, n int) bool {
	even := share.Even(n)
	if even >= share.One {
		return false
	}
	switch p.Kind {
	case share.Bucket, share.Meter:
		return p.For(1, share.State{}, 0) > even || p.For(1, share.State{}, 0) < 0
	}
	return p.Rate*even < share.One
}

// OpsDone applies the replies to ops (as NextOps returned them), answered
// at now (ns), or their failure: err for the whole call, else each reply's
// Err. unreachable says the store cannot be reached (the breaker is open):
// requests waiting on the keys are decided under the fallback.
func (s *Shares) OpsDone(ops []share.Op, replies []share.Reply, err error, unreachable bool, now int64) {
	us := share.Micros(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range ops {
		ks := s.keys[keyLim{ops[i].Key, ops[i].Limit}]
		if ks == nil || ks.op == nil || ks.op.Seq != ops[i].Seq {
			continue
		}
		var r share.Reply
		if err == nil && i < len(replies) {
			r = replies[i]
		} else if err == nil {
			r.Err = errors.New("protocol: no reply")
		}
		switch {
		case err != nil || r.Err != nil && !remote.IsKeyFault(r.Err):
			ks.retry = true
			s.queueRetry(ks)
			if unreachable {
				release(ks, Unreachable, 0)
			}
		case r.Err != nil:
			s.fault(ks, r.Err, us)
		default:
			s.applied(ks, r, now, us)
		}
		if ks.heardLater > 0 && ks.op == nil {
			s.heardSince(ks, us)
		}
	}
}

// call sends a call at (µs) on ks's contest epoch to the registry with a
// beat. A call the store published when it answered the op (published) goes
// with the next beat, while the node hears the channel: the holders heard
// it from the store. Otherwise, with the channel unheard here (pub/sub may
// be unavailable: the others then read calls only in the registry), or
// with the node's runner resting (its next beat up to QuietBeat away), the
// node beats at once. s.mu is held.
func (s *Shares) call(ks *keyState, epoch, at, expiry int64, published bool) {
	ks.called = at
	published = published && s.listening
	s.calls = append(s.calls, share.Contest{Key: ks.kl.key, Limit: ks.kl.lim, Epoch: epoch, CallAt: at, Expiry: expiry,
		Published: published})
	if s.wake != nil && (!published || share.Nanos(at) < s.restEnd) {
		// Unpublished, or the node's next beat is a rest away (up to
		// QuietBeat): at once.
		s.wake(WakeBeat)
	}
}

// queueRetry queues ks's failed op to be sent again. s.mu is held.
func (s *Shares) queueRetry(ks *keyState) {
	if !s.queued[ks] {
		s.queued[ks] = true
		s.queue = append(s.queue, ks)
	}
}

// fault handles a store that refuses a key: decided under the fallback,
// logged and counted, tried again later. s.mu is held.
func (s *Shares) fault(ks *keyState, err error, us int64) {
	s.stats.faults.Add(1)
	if !ks.faulted {
		s.once(ks.kl, "protocol: the store refuses this key: deciding it under the fallback until it is fixed (counted in Stats.KeyFaults)",
			"key", ks.kl.key, "limit", ks.kl.lim.String(), "err", err)
	}
	ks.faulted, ks.faultRetry = true, us+share.Duration(faultRetry)
	ks.op = nil
	s.eng.SetFault(ks.kl.key, ks.kl.lim, true)
	release(ks, Unreachable, 0)
}

// Refused counts a key fault outside the share ops (what names the key: a
// key's ledger, the fleet's registry) and logs it the first time for
// (key, lim).
func (s *Shares) Refused(key string, lim limit.Limit, what string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.faults.Add(1)
	s.once(keyLim{key, lim}, "protocol: redis refuses "+what+": its key holds another type; counted in Stats.KeyFaults, tried again later",
		"key", key, "err", err)
}

// once logs msg the first time it concerns kl, for up to maxNamedKeys keys:
// a flood of faulty keys never floods the log (the stats count them all).
// s.mu is held.
func (s *Shares) once(kl keyLim, msg string, args ...any) {
	k := msg + "\x00" + kl.key
	if _, ok := s.named[k]; ok || len(s.named) >= maxNamedKeys {
		return
	}
	s.named[k] = struct{}{}
	s.log.Warn(msg, args...)
}

// applied applies reply r to ks's op. s.mu is held.
func (s *Shares) applied(ks *keyState, r share.Reply, now, us int64) {
	op := ks.op
	ks.op = nil
	ks.applied = op.Seq
	if ks.faulted {
		ks.faulted = false
		s.eng.SetFault(ks.kl.key, ks.kl.lim, false)
		s.log.Info("protocol: the store accepts the key again", "key", ks.kl.key, "limit", ks.kl.lim.String())
	}
	if r.Lost {
		s.stats.lost.Add(1)
		s.once(ks.kl, "protocol: the store had lost a contest this node held a grant of (evicted, deleted, or a restart): rebuilt from this node's grant (counted in Stats.StateLost)",
			"key", ks.kl.key, "limit", ks.kl.lim.String())
	}
	if r.Over {
		s.stats.over.Add(1)
	}
	if r.Reset > 0 {
		// The store says the key was reset; a node that has not heard of
		// it yet (the registry tells it a beat or so later) starts its
		// state afresh now, before it applies what the reply grants it of
		// the fresh pool: what it admits in that is counted from here on.
		s.resetHeard(ks.kl, r.Reset, false, us)
	}
	if r.Outcome == share.Ended {
		// The contest is gone and the op changed nothing: the key is the
		// fleet's even split again.
		s.to(ks, Ended, Input{})
		if len(ks.waiters) > 0 {
			release(ks, Retry, 0)
		}
		s.forget(ks)
		return
	}
	if op.Leave {
		s.to(ks, Left, Input{})
		return
	}
	ks.epoch, ks.leaseEnd = r.Epoch, r.LeaseEnd
	// The whole key is at home here, unless a call came while the op was
	// on its way: the give it queued answers that call.
	s.to(ks, Granted, Input{Grant: r.Grant, Whole: r.Grant >= share.One && ks.callSeen <= op.At})
	if ks.dropped {
		// Sent before the node found it had been counted gone: what it
		// grants is not used, and goes back.
		ks.dropped = false
		if s.to(ks, Lapsed, Input{})&CountExpired != 0 {
			s.enqueue(ks, wantIdle)
		}
		r.Growth, r.Replace = 0, false
	}
	ks.expiry = max(ks.expiry, r.Expiry)
	replaced := r.Replace && s.eng.Replace(ks.kl.key, ks.kl.lim, local.Share(r.Grant)) // its shadow is the exact state
	if ks.grant > 0 && ks.leaseEnd-2*share.Duration(s.cfg.Interval) <= us {
		// Answered too late to use: lapsed already, as far as the store
		// will know.
		s.to(ks, Lapsed, Input{})
	} else if replaced {
		s.setClaim(ks.kl, r.Grant)
	} else if r.Growth > 0 {
		// The pool's state as the store sent it, refilled by the reply's
		// way back (the node's clock since the store's, at most the op's
		// round trip and the network's margin): not by the node's clock
		// alone, which, run ahead, would refill it early by as much; and
		// not by nothing, which a client at exactly the limit's rate, its
		// next request as far from the first as the rate allows, would
		// find a reply's way short.
		back := min(max(us-r.Now, 0), max(us-op.At, 0), share.Duration(margin))
		pool := ks.params.Decay(r.Pool, r.Now, r.Now+back)
		s.eng.GrowBy(now, ks.kl.key, ks.kl.lim, local.Share(r.Growth), pool)
		s.setClaim(ks.kl, r.Grant)
	} else {
		s.hold(ks, ks.grant)
	}
	if end := ks.leaseEnd - s.leaseMargin(); ks.grant > 0 && end < s.valid {
		// The engine may decide in grants until the last sweep's validity:
		// a grant whose lease ends sooner lowers it now, not at the next
		// sweep (a process paused in between would use it past its end).
		s.valid = end
		s.eng.SetValidUntil(share.Nanos(end))
	}
	if r.Epoch != ks.regEpoch || ks.registered < r.Expiry-share.Duration(s.cfg.Lease) {
		// The registry must know the contest lives at least as long.
		s.calls = append(s.calls, share.Contest{Key: ks.kl.key, Limit: ks.kl.lim, Epoch: r.Epoch, Expiry: r.Expiry,
			Quiet: quietKey(ks.params)})
		ks.regEpoch, ks.registered = r.Epoch, r.Expiry
	}
	switch r.Outcome {
	case share.Wait:
		s.stats.waits.Add(1)
		ks.retryAt = us + share.Duration(s.cfg.Interval)/4
		if age := us - ks.called; ks.called > 0 && !ks.recalled && r.Epoch == ks.callEpoch &&
			age >= share.Duration(s.cfg.Interval)/2 && age < 2*share.Duration(s.cfg.Interval) {
			// Its call still unanswered half an interval on: a node may
			// not have heard it (the channel delivers at most once, a node
			// at rest reads the registry only every QuietBeat, and the
			// call the store published reaches the registry only with
			// this node's next beat). Called once more, within the call's
			// window, through the registry at once: the nodes that heard
			// the first give what they can spare again. (Republishing the
			// first call as it was, which they ignore, refused a third
			// more requests within the limit in the simulation; called
			// again only an interval on, with the first call published
			// by the store, 1,109 of 20,000 scenarios failed, against
			// 1,069 with the call sent through the registry at once and
			// 995 now.)
			ks.recalled = true
			s.call(ks, r.Epoch, r.Now, r.Expiry, false)
		}
	case share.Call:
		s.stats.calls.Add(1)
		ks.recalled, ks.callEpoch = false, r.Epoch
		ks.retryAt = us + share.Duration(s.cfg.Interval)/4
		s.call(ks, r.Epoch, r.Now, r.Expiry, true) // the store published it
	case share.NoRoom:
		s.stats.noRoom.Add(1)
		if s.resets[ks.kl] >= op.At {
			// The answer to an op made before the key was reset: of the
			// state before. The requests ask again, of the fresh state.
			ks.retryAt = us
			break
		}
		// Refused over and over, the key is over its limit: it asks less
		// often, up to 16 intervals apart (a key over its limit everywhere
		// costs the store one ask a node that often, not one a request).
		back := share.Duration(s.cfg.Interval) * int64(min(1<<(ks.refused/16), 16))
		until := r.Until
		if r.Exact {
			// Nobody else holds any of it: nothing brings room before
			// Until but the refill. It refuses alone until then (asking
			// sooner would only be told the same).
			back = 0
		} else if ks.refused < 16 {
			// Not yet refused over and over: the room a call did not
			// bring may come with a holder's next renewal, so it asks
			// again within two intervals rather than at the store's quiet
			// time (which doubles while calls fail).
			back, until = 0, min(until, us+2*share.Duration(s.cfg.Interval))
		}
		ks.deniedUntil = max(until, us+back)
		ks.overAt = us
		if r.Exact {
			ks.overAt = 0 // nobody else holds any: only the refill brings room, and a request past Until asks for it
		}
	}
	if r.Outcome == share.Done && (r.Growth > 0 || r.Served > 0) {
		// The fleet gave it room. A key over its limit stays so (it is
		// given room whenever the pool refills: ending the refusals alone
		// then made 3.4% of the hot key's decisions wait, p99 33 ms,
		// against 1.0% and 1.2 ms); its next no-room answer, or ten
		// intervals without one, decides.
		ks.refused = 0
	}
	if r.Served > 0 {
		ks.servedAt = us
	}
	if ks.state == Home && (op.Serve || r.Growth > 0) {
		ks.homeAt = us
	}
	// What the store admitted itself goes to the oldest waiters; every
	// other decides again in what the node holds now, and one still short
	// asks again (or, after NoRoom, is refused at once).
	served := r.Served
	for len(ks.waiters) > 0 && served >= ks.waiters[0].n {
		served -= ks.waiters[0].n
		ks.waiters[0].settle(Admitted, share.Nanos(r.ServedAt))
		ks.waiters = ks.waiters[1:]
	}
	release(ks, Retry, 0)
	if len(ks.waiters) > 0 && ks.retryAt <= us {
		s.enqueue(ks, wantAsk)
	}
	if ks.intents != 0 {
		s.queueRetry(ks)
	}
	if ks.busy() && s.busy == 0 {
		// Busy now, not only as of the next sweep, which a node at rest
		// makes a quiet beat away: it beats and sweeps every interval.
		s.busy = 1
		s.nextSweep = min(s.nextSweep, now+int64(s.cfg.Interval))
	}
}

// ---------------------------------------------------------------------------
// Time.

// Tick runs what time brings at now (ns): grants that lapse, contests that
// end, leases to renew, idle grants to give back, waits that end, asks to
// make again. It returns when it next has something to do (ns): the runner
// calls it by then, and at least every interval, or, while the node is at
// rest (Rest), every quiet beat.
func (s *Shares) Tick(now int64) (next int64) {
	us := share.Micros(now)
	interval := share.Duration(s.cfg.Interval)
	s.findOutgrown(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	// A node at rest sweeps once a quiet beat, not every interval (Rest);
	// the grants it holds (homes, unused) are good until the next sweep.
	// (Asked at sweeps alone: quiet reads every shard's clock, and a busy
	// node ticks on every answer.)
	sweep := now >= s.nextSweep
	gap := int64(s.cfg.Interval)
	if sweep && s.quiet(now) {
		gap = s.quietGap()
	}
	valid := us + share.Micros(gap) + 2*interval
	if s.lastBeat > 0 && !s.registryFault {
		// No grant past an active window after the last heartbeat: the
		// store then lets the others have it.
		valid = min(valid, s.lastBeat+share.Duration(s.cfg.ActiveWindow)-s.leaseMargin())
	}
	if s.beatFailed != 0 {
		valid = min(valid, share.Micros(s.beatFailed))
	}
	if s.rejoined {
		valid = min(valid, us-1) // until the registry says why it was not in the fleet
	}
	wake := us + share.Micros(gap)
	if at := s.queueReports(now); at != 0 {
		wake = min(wake, share.Micros(at))
	}
	if !s.eng.Degraded() { // what is owed is reported once the store is back
		s.pressed = s.eng.TakePressed(s.pressed[:0])
	} else {
		s.pressed = s.pressed[:0]
	}
	for _, p := range s.pressed {
		if p.Owed {
			if ks := s.state(keyLim{p.Key, p.Limit}, true); ks != nil {
				s.enqueue(ks, wantReport)
			}
			continue
		}
		ks := s.state(keyLim{p.Key, p.Limit}, true)
		if ks == nil || ks.op != nil || ks.intents != 0 || ks.deniedUntil > us {
			continue
		}
		s.updateRate(ks, us)
		held := ks.grant
		if ks.state == Even {
			held = share.Even(s.fleet.size())
		}
		if held < share.One && s.rateShare(ks) > held {
			s.enqueue(ks, wantMore) // its demand outruns its share's refill
		}
	}
	// Every key once an interval (the sweep: leases, idleness, contests
	// that end); between sweeps only the keys requests wait on, whose
	// deadlines and retries fall between them. A sweep costs a look at
	// every key the node follows: run on every wake, it took a node most
	// of a core with many keys contested.
	busy := 0
	keys := s.waiting
	if sweep {
		keys = s.orderedKeys()
		s.nextSweep = now + gap
	} else {
		wake = min(wake, share.Micros(s.nextSweep))
	}
	for _, ks := range keys {
		for _, w := range ks.waiters {
			end := w.deadline
			if ks.op != nil && !ks.retry {
				end += int64(s.cfg.Grace) // the store has the ask in hand: its answer, or the call's failure, decides
			}
			if end <= now {
				w.settle(Expired, 0)
				ks.refusedAt = us
			} else {
				wake = min(wake, share.Micros(end)+1)
			}
		}
		ks.waiters = slices.DeleteFunc(ks.waiters, func(w *Waiter) bool { return w.settled })
		if sweep {
			valid = s.sweepKey(ks, us, valid)
		}
		if sweep && !ks.gone && ks.busy() {
			busy++
		}
		switch {
		case ks.retryAt > us:
			wake = min(wake, ks.retryAt) // waiters come back to it after each answer
		case len(ks.waiters) > 0 && ks.op == nil:
			// Time to try again: each decides again in what the node holds
			// now (its own refill may hold it), and asks if still short.
			release(ks, Retry, 0)
		}
		s.forget(ks)
	}
	s.waiting = slices.DeleteFunc(s.waiting, func(ks *keyState) bool {
		gone := len(ks.waiters) == 0 || ks.gone
		if gone {
			ks.waiting = false
		}
		return gone
	})
	if !sweep {
		return share.Nanos(wake)
	}
	s.resetsBefore = max(s.resetsBefore, us-share.Duration(s.cfg.ActiveWindow))
	for kl, at := range s.resets {
		if at < s.resetsBefore {
			delete(s.resets, kl) // older than an active window: resetHeardBy says it heard it
		}
	}
	s.valid, s.busy = valid, busy
	s.eng.SetValidUntil(share.Nanos(valid))
	return share.Nanos(wake)
}

// sweepKey runs what time brings to ks at us, once an interval: a refusal
// or a fault that ends, a grant that lapses, a lease to renew, a grant
// idle here, a contest that ended. It returns valid (µs) lowered to the
// end of what ks's grant may be used for. s.mu is held.
func (s *Shares) sweepKey(ks *keyState, us, valid int64) int64 {
	interval := share.Duration(s.cfg.Interval)
	margin := s.leaseMargin()
	if ks.deniedUntil != 0 && ks.deniedUntil <= us {
		ks.deniedUntil = 0
	}
	if ks.faulted && ks.faultRetry <= us {
		ks.faulted = false
		s.eng.SetFault(ks.kl.key, ks.kl.lim, false)
	}
	if ks.state.contested() {
		if ks.grant > 0 && ks.leaseEnd-margin <= us {
			s.to(ks, Lapsed, Input{}) // the store takes it as spent at its end
		}
		if ks.grant > 0 && us-ks.rateAt >= 2*interval {
			s.updateRate(ks, us)
		}
		idle := ks.grant > 0 && ks.lastUse < us-s.idleAfter(ks) && len(ks.waiters) == 0
		switch {
		case ks.op != nil || ks.intents != 0:
		case ks.grant > 0 && ks.leaseEnd-s.leaseOf(ks)/2 <= us && !(ks.state == Home && idle):
			s.enqueue(ks, wantRenew)
		case idle:
			s.enqueue(ks, wantIdle) // idle: back to the pool, where others find it and its spent state refills at the pool's rate
		case ks.grant == 0 && ks.expiry+margin <= us && len(ks.waiters) == 0:
			s.to(ks, ExpiryPassed, Input{}) // the contest has ended: the even split again
		}
		if ks.grant > 0 {
			valid = min(valid, ks.leaseEnd-margin)
		}
	}
	return valid
}

// leaseMargin is how long before its lease's end a node stops using a
// grant (µs): two intervals and a millisecond, on its own clock.
func (s *Shares) leaseMargin() int64 { return 2*share.Duration(s.cfg.Interval) + 1000 }

// leaseOf is how long ks's grant holds from its last renewal (µs): the
// store gives the whole key a home's lease. s.mu is held.
func (s *Shares) leaseOf(ks *keyState) int64 {
	if ks.grant >= share.One {
		return share.Duration(s.cfg.HomeLease)
	}
	return share.Duration(s.cfg.Lease)
}

// idleAfter is how long ks may go unused here before its grant goes back
// to the pool (µs): three intervals; for a home, half a home lease. A
// sparse client pinned here finds its key at home; demand that moves away
// asks where it goes, and the call ends the home. s.mu is held.
func (s *Shares) idleAfter(ks *keyState) int64 {
	if ks.state == Home {
		return share.Duration(s.cfg.HomeLease) / 2
	}
	return 3 * share.Duration(s.cfg.Interval)
}

// orderedKeys returns the keys held, in the order they were made, having
// swept out those forgotten since the last call. Keys made while the
// caller ranges over the result are not in it. s.mu is held.
func (s *Shares) orderedKeys() []*keyState {
	s.order = slices.DeleteFunc(s.order, func(ks *keyState) bool { return ks.gone })
	return s.order
}

// ---------------------------------------------------------------------------
// Demand.

// updateRate folds the key's demand since the last look into its rate, and
// notes when it was last asked for. Demand taken sooner than half an
// interval after the last fold waits for the next: a rate measured over a
// sliver of time is noise. s.mu is held.
func (s *Shares) updateRate(ks *keyState, us int64) {
	var taken [2]local.Spend
	got := s.eng.TakeKey(share.Nanos(us), ks.kl.key, ks.kl.lim, taken[:0])
	for _, t := range got {
		if t.Spent > 0 && s.cfg.Spent != nil {
			s.cfg.Spent(t)
		}
		ks.hits += t.Hits
		if t.Hits > 0 {
			ks.lastUse = max(ks.lastUse, share.Micros(t.Since)) // the engine's: when last asked for
		}
	}
	interval := share.Duration(s.cfg.Interval)
	if ks.rateAt == 0 {
		ks.rateAt = us - interval // the first look: its demand as if over an interval
	}
	elapsed := us - ks.rateAt
	if elapsed < interval/2 {
		return
	}
	dt := float64(elapsed) / 1e6
	tau := float64(5*s.cfg.Interval) / float64(time.Second)
	a := 1 - math.Exp(-dt/tau)
	if ks.rate == 0 {
		a = 1
	}
	ks.recent = float64(ks.hits) / dt
	ks.rate += a * (ks.recent - ks.rate)
	ks.rateAt, ks.hits = us, 0
}

// need is the share the node's demand on ks asks for: its rate, and room for
// its heaviest request. s.mu is held.
func (s *Shares) need(ks *keyState) int64 {
	if ks.rate <= 0 && ks.lastUse == 0 {
		return 0
	}
	return min(max(s.rateShare(ks), s.oneShare(ks)), share.One)
}

// rateShare is the share whose rate is the node's demand on ks: a share
// larger would overflow here, its refill wasted, while the pool serves what
// the node's demand brings beyond it. s.mu is held.
func (s *Shares) rateShare(ks *keyState) int64 {
	perSecond := float64(ks.kl.lim.Rate) / ks.kl.lim.Period.Seconds()
	return min(int64(math.Ceil(ks.rate/perSecond*share.One)), share.One)
}

// wholeUnit reports whether a request of weight 1 needs p's whole limit (a
// token bucket or window of burst 1: a per-client key): the share that
// would hold one is the whole key, which every other node asking would call
// away, spent, so the pool serves such a key request by request however
// busy the node is. Not a meter (a leaky bucket), whose share holds any
// request it queues, nor a key whose heavier requests alone need all of it.
func wholeUnit(p share.Params) bool {
	if p.Kind == share.Meter {
		return false
	}
	one := p.For(1, share.State{}, 0)
	return one < 0 || one >= share.One
}

// oneShare is the least share that holds the node's heaviest request on ks
// when full.
func (s *Shares) oneShare(ks *keyState) int64 {
	one := ks.params.For(max(ks.maxWeight, 1), share.State{}, 0)
	if one < 0 {
		return share.One
	}
	return one
}

// spare is what ks keeps when it answers a call: room for the requests
// waiting and for its demand until it could ask again (an interval), and
// nothing when its state has no room at all (its share would only refill
// here while another node waits for room). Everything else goes back, so a
// call that brings back too little means the fleet has no room to give.
// s.mu is held.
func (s *Shares) spare(ks *keyState, st share.State, us int64) int64 {
	s.updateRate(ks, us)
	soon := ks.want()
	if ks.lastUse >= us-share.Duration(s.cfg.Interval)/2 {
		// Still asked for: what the last interval's demand would take over
		// the next two (the average lags a demand that just fell).
		soon += int64(math.Ceil(2 * ks.recent * float64(s.cfg.Interval) / float64(time.Second)))
	}
	if soon == 0 {
		return 0
	}
	g := ks.params.For(soon, st, us)
	if g < 0 {
		return share.One // its state could not hold its own demand with the whole limit: nothing to spare
	}
	return min(g, share.One)
}

// ---------------------------------------------------------------------------
// Leaving and reading.

// Leave queues, for every key this node holds a grant of, has an op in
// flight on or an op queued for, its op giving everything back: the node
// closes. An op in flight may bring a grant in, even on a key whose
// contest it begins (an even key's first ask): its answer is given back
// too. An op built after Leave asks for nothing (build).
func (s *Shares) Leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.left = true
	for _, ks := range s.orderedKeys() {
		release(ks, Unreachable, 0)
		if ks.grant > 0 || ks.op != nil || ks.intents != 0 || s.queued[ks] {
			s.enqueue(ks, wantLeave)
		}
	}
}

// Holding returns how many keys still hold a grant or have an op in
// flight or to send.
func (s *Shares) Holding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ks := range s.keys {
		if ks.grant > 0 || ks.op != nil || s.queued[ks] {
			n++
		}
	}
	return n
}

// Stats returns the protocol's counters.
func (s *Shares) Stats() Stats {
	s.mu.Lock()
	contested, granted, homes := 0, 0, 0
	for _, ks := range s.keys {
		if ks.state.contested() {
			contested++
		}
		if ks.state.holds() {
			granted++
		}
		if ks.state == Home {
			homes++
		}
	}
	nodes := s.fleet.size()
	s.mu.Unlock()
	st := &s.stats
	return Stats{Ops: st.ops.Load(), Asks: st.asks.Load(), Joins: st.joins.Load(), Gives: st.gives.Load(), Renews: st.renews.Load(),
		Calls: st.calls.Load(), Waits: st.waits.Load(), NoRoom: st.noRoom.Load(), Lost: st.lost.Load(), Over: st.over.Load(),
		Faults: st.faults.Load(), Expired: st.expired.Load(), Resets: st.resets.Load(), Outgrown: st.outgrown.Load(), Contested: contested,
		Granted: granted, Homes: homes, Nodes: nodes}
}

// Describe returns ks's state for debugging: state, epoch, grant, lease.
func (s *Shares) Describe(key string, lim limit.Limit) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.keys[keyLim{key, lim}]
	if ks == nil {
		return "even (no state)"
	}
	return fmt.Sprintf("%v epoch=%d grant=%d lease=%d expiry=%d waiters=%d op=%v intents=%b", ks.state, ks.epoch, ks.grant,
		ks.leaseEnd, ks.expiry, len(ks.waiters), ks.op != nil, ks.intents)
}
