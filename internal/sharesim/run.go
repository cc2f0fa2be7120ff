package sharesim

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/storemodel"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/share"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// base is the Unix time the simulated store's clock starts at.
const base = int64(1_800_000_000_000_000_000)

// Timing of the simulated network and breaker.
const (
	callTimeout    = 100 * time.Millisecond
	openFor        = time.Second
	failuresToOpen = 3
	drain          = 3 * time.Second // after the traffic, until quiescence
)

// Source is where a decision was made.
type Source uint8

// The sources.
const (
	Local    Source = iota // in the node's share, from memory
	Remote                 // after asking the store (admitted after a wait, or refused by its answer)
	Degraded               // under the fallback: the store out of reach
)

// String names the source: "local", "remote" or "degraded".
func (s Source) String() string { return [...]string{"local", "remote", "degraded"}[s] }

// Decision is one request decided under one of its key's limits.
type Decision struct {
	Req   int // index in Scenario.Requests
	Limit int // index in the key's Limits
	Node  int
	Sent  time.Duration // when the request arrived
	// Seen is when the node first decided it by its own estimate of the
	// store's clock (which the simulation knows exactly): the time the
	// node's engine charged it at. Compliance is judged on it.
	Seen time.Duration
	// First is when the node first decided it (the simulation's time): a
	// request that reached a node before its first heartbeat waits for it.
	First   time.Duration
	At      time.Duration // when it was decided
	N       int64
	Allowed bool
	Source  Source
	// Told is what the store last answered the node's ops on the key and
	// limit before the decision, if it asked (Asked): for telling failures
	// apart.
	Told  share.Outcome
	Asked bool
}

// Record is what a run produced.
type Record struct {
	Scenario  *Scenario
	Decisions []Decision
	// Ops and Beats count the calls the store answered; OpsByKind the ops
	// by what they carried.
	Ops, Beats int64
	// Stats is each node's protocol counters at the end.
	Stats []protocol.Stats
	// Errors are unexpected errors of a decision.
	Errors []string
	// Trace is, in a run made by RunTraced, every op, answer, call heard
	// and decision of the traced key, one line each.
	Trace []string
	// Resets is what became of each of the scenario's resets (as
	// Scenario.Resets), for judging each key afresh after its resets.
	Resets []ResetDone
}

// ResetDone is what became of one reset of the scenario.
type ResetDone struct {
	Reset
	// Played: the store can reset (a Resetter); a run on one that cannot
	// plays no reset.
	Played bool
	// Stored: the store ran the reset, at Ran (the store's clock, as a
	// time of the scenario: what Shares.Reset is told); Contest: it had
	// a contest of the key to reset.
	Stored, Contest bool
	Ran             time.Duration
	// Made: the node was told, and started the key afresh (Shares.Reset):
	// the caller's Reset returned nil, the client was forgiven.
	Made bool
	// Err is why the call failed (the breaker open, the store out of
	// reach): the caller was told the client was not forgiven, though a
	// store that ran the call late (paused, slow) reset the pool.
	Err string
}

// event is something that happens at a time.
type event struct {
	at  time.Duration
	seq int64
	fn  func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// sim is one run in progress.
type sim struct {
	sc    *Scenario
	rng   *rand.Rand
	now   time.Duration
	q     queue
	seq   int64
	store Store
	nodes []*node
	rec   *Record
	// The store's faults as of now.
	down, paused bool
	latency      time.Duration
	held         []func() // calls held while the store is paused
	traced       string   // the key whose story the run records (RunTraced)
	// missed are the resets (the store's µs) the channel misses
	// (Reset.Missed).
	missed map[int64]bool
}

// RunTraced plays sc on the Go model, as Run does, recording in the
// record's Trace the story of the key named key: each op a node sent and
// what the store answered, each call a node heard, each decision.
func RunTraced(sc *Scenario, key string) *Record {
	m := storemodel.New(share.Duration(sc.ActiveWindow))
	return runOn(sc, ModelStore{m}, key)
}

// trace records a line of the traced key's story.
func (s *sim) trace(key string, format string, args ...any) {
	if s.traced == "" || key != s.traced {
		return
	}
	s.rec.Trace = append(s.rec.Trace, fmt.Sprintf("%12v ", s.now.Round(time.Microsecond))+fmt.Sprintf(format, args...))
}

// Store is the store's side the nodes call: the Go model, or in the
// conformance test the model and real Redis side by side. Times are the
// store's clock (Unix µs); a batch of ops is applied at one instant, as one
// script call.
type Store interface {
	Ops(now int64, node string, set share.Settings, ops []share.Op, replies []share.Reply)
	Beat(now int64, node string, b share.Beat) share.BeatReply
	// Restart empties the store (a restart without data, a flush); Delete
	// drops one (key, limit)'s hash (an eviction).
	Restart()
	Delete(key string, lim limit.Limit)
}

// Resetter is a Store that resets a contest as reset.lua does (Async
// mode's reset, remote.Store.ResetShares), called by node at now (the
// store's µs); it reports whether there was a contest. A run on a store
// that is not one plays no reset (the conformance tests' dual store).
type Resetter interface {
	ResetShares(now int64, node, key string, lim limit.Limit) bool
}

// ModelStore is the Go model as a Store.
type ModelStore struct{ *storemodel.Model }

// ResetShares is the model's Reset.
func (m ModelStore) ResetShares(now int64, _, key string, lim limit.Limit) bool {
	return m.Reset(now, key, lim)
}

// Ops applies each op in turn at now.
func (m ModelStore) Ops(now int64, node string, set share.Settings, ops []share.Op, replies []share.Reply) {
	for i, op := range ops {
		replies[i] = m.Op(now, node, set, op)
	}
}

// Run plays sc on the Go model and returns its record.
func Run(sc *Scenario) *Record {
	m := storemodel.New(share.Duration(sc.ActiveWindow))
	rec := RunOn(sc, ModelStore{m})
	for _, l := range m.Leaks {
		rec.Errors = append(rec.Errors, "store: "+l)
	}
	return rec
}

// RunOn plays sc against store and returns its record.
func RunOn(sc *Scenario, store Store) *Record { return runOn(sc, store, "") }

func runOn(sc *Scenario, store Store, traced string) *Record {
	s := &sim{sc: sc, rng: rand.New(rand.NewPCG(uint64(sc.Seed), 0x513ed)), store: store, rec: &Record{Scenario: sc}, traced: traced}
	for i := range sc.Nodes {
		s.nodes = append(s.nodes, &node{s: s, idx: i, id: fmt.Sprintf("n%d", i), spec: sc.Nodes[i]})
		nd := s.nodes[i]
		s.at(sc.Nodes[i].Join, nd.start)
		if sc.Nodes[i].Leave < sc.Duration {
			s.at(sc.Nodes[i].Leave, nd.stop)
		}
		for _, p := range sc.Nodes[i].Pauses {
			s.at(p.From, func() { nd.pausedUntil = p.To })
			s.at(p.To, nd.resume)
		}
	}
	for _, f := range sc.Faults {
		s.fault(f)
	}
	for i := range sc.Requests {
		r := &sc.Requests[i]
		s.at(r.At, func() { s.nodes[r.Node].request(i) })
	}
	s.rec.Resets = make([]ResetDone, len(sc.Resets))
	if _, ok := store.(Resetter); ok {
		for i, r := range sc.Resets {
			s.rec.Resets[i] = ResetDone{Reset: r, Played: true}
			s.at(r.At, func() { s.nodes[r.Node].reset(&s.rec.Resets[i]) })
		}
	}
	s.at(sc.Duration+drain, func() {
		for _, nd := range s.nodes {
			if nd.up {
				nd.stop()
			}
		}
	})
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(*event)
		s.now = e.at
		e.fn()
	}
	for _, nd := range s.nodes {
		if nd.sh != nil {
			s.rec.Stats = append(s.rec.Stats, nd.sh.Stats())
		}
	}
	return s.rec
}

// at schedules fn at t.
func (s *sim) at(t time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.q, &event{at: max(t, s.now), seq: s.seq, fn: fn})
}

// fault schedules f.
func (s *sim) fault(f Fault) {
	switch f.Kind {
	case Kill:
		s.at(f.From, func() { s.down = true })
		s.at(f.To, func() { s.down = false; s.store.Restart() })
	case Pause:
		s.at(f.From, func() { s.paused = true })
		s.at(f.To, func() {
			s.paused = false
			held := s.held
			s.held = nil
			for _, fn := range held {
				fn()
			}
		})
	case Slow:
		s.at(f.From, func() { s.latency = f.Latency })
		s.at(f.To, func() { s.latency = 0 })
	case Flush:
		s.at(f.From, func() { s.store.Restart() })
	case Evict:
		s.at(f.From, func() {
			k := s.sc.Keys[f.Key%len(s.sc.Keys)]
			for _, l := range k.Limits {
				s.store.Delete(k.Name, l)
			}
		})
	case Partition:
		nd := s.nodes[f.Node]
		s.at(f.From, func() { nd.cut = true })
		s.at(f.To, func() { nd.cut = false })
	}
}

// publish delivers the calls among cs to every other node up, a hop later,
// as the store's pub/sub does: at most once, and not to a node cut off from
// the store (nor, one time in fifty, at all).
func (s *sim) publish(from *node, cs []share.Contest) {
	for _, c := range cs {
		if c.Reset == 0 && (c.CallAt == 0 || c.Published) {
			continue // a renewal of the registry, not a call; or a call the store published when it made it
		}
		if c.CallAt == 0 && s.missed[c.Reset] {
			s.trace(c.Key, "the channel misses %+v", c)
			continue // the others read it in the registry
		}
		s.broadcast(from, func(nd *node) {
			s.trace(c.Key, "node %d hears %+v", nd.idx, c)
			nd.sh.Heard(c, nd.mapped())
		})
	}
}

// publishJoin delivers a node's join (the fleet had nodes at at, µs) as
// publish delivers a call.
func (s *sim) publishJoin(from *node, nodes int, at int64) {
	s.broadcast(from, func(nd *node) { nd.sh.Joined(nodes, at, from.id) })
}

// broadcast delivers a message from a node to every other node up, a hop
// later, as the store's pub/sub does: hear runs on each node it reaches,
// at most once, not on a node cut off from the store (nor, one time in
// fifty, at all).
func (s *sim) broadcast(from *node, hear func(nd *node)) {
	for _, nd := range s.nodes {
		if nd == from || !nd.up || nd.cut || s.rng.IntN(50) == 0 {
			continue
		}
		s.at(s.now+s.hop(), func() {
			nd.gate(func() {
				if nd.cut || !nd.ready {
					return
				}
				hear(nd)
			})
		})
	}
}

// hop is one way's delay of a call.
func (s *sim) hop() time.Duration {
	d := time.Duration(100+s.rng.IntN(400)) * time.Microsecond
	if s.rng.IntN(100) == 0 {
		d += time.Duration(s.rng.IntN(1500)) * time.Microsecond // a spike of up to 1.5 ms
	}
	return d + s.latency
}

// storeNow is the store's clock (µs).
func (s *sim) storeNow() int64 { return share.Micros(base + int64(s.now)) }

// call sends run to the store from nd: the reply (or the failure) comes
// back through done, at most callTimeout after it was sent. run executes at
// the store, atomically, when the call arrives (or when a paused store
// resumes).
func (s *sim) call(nd *node, run func(now int64) any, done func(reply any, err error)) {
	finished := false
	finish := func(reply any, err error) {
		if finished {
			return
		}
		finished = true
		done(reply, err)
	}
	if nd.cut {
		s.at(s.now+callTimeout, func() { finish(nil, errTimeout) })
		return
	}
	s.at(s.now+s.hop(), func() {
		exec := func() {
			if s.down {
				s.at(s.now+s.hop(), func() { finish(nil, errRefused) })
				return
			}
			reply := run(s.storeNow())
			s.at(s.now+s.hop(), func() { finish(reply, nil) })
		}
		if s.paused {
			s.held = append(s.held, exec)
			return
		}
		exec()
	})
	s.at(s.now+callTimeout, func() { finish(nil, errTimeout) })
}

var (
	errTimeout = errors.New("sim: call timed out")
	errRefused = errors.New("sim: connection refused")
	errOpen    = errors.New("sim: breaker open")
)

// quiet is a logger that drops everything.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// node is one simulated node.
type node struct {
	s    *sim
	idx  int
	id   string
	spec Node
	eng  *local.Engine
	sh   *protocol.Shares
	off  *clock.Offset

	up          bool
	ready       bool          // its first heartbeat succeeded (after StartSettle, one sent then)
	settleAt    time.Duration // when its start's second heartbeat is sent (StartSettle; zero: not yet set)
	cut         bool          // partitioned from the store
	pausedUntil time.Duration
	parked      []func() // what arrived while paused
	unready     []func() // requests that arrived before its first heartbeat

	beating, beatAgain bool
	sending, sendAgain bool
	roundAt            time.Duration // the next round scheduled
	tickAt             time.Duration // the next tick scheduled (0: none)

	// told is what the store last answered an op of each key and limit
	// that wanted room.
	told map[string]share.Outcome

	// The breaker, as package breaker's (gobreaker's two-step breaker):
	// gen is its generation, which every change of state starts; a call's
	// outcome counts only in the generation that let it through. A call
	// let through before the breaker opened that succeeds after (a paused
	// store that ran it late) does not close it: the node stays degraded
	// until its probe succeeds, as the others do.
	failures int
	open     bool
	openTill time.Duration
	probing  bool
	gen      int64
}

// local is the node's own clock (Unix ns).
func (nd *node) local() time.Time {
	t := base + int64(nd.s.now) + int64(nd.spec.Skew)
	if nd.spec.Step != 0 && nd.s.now >= nd.spec.StepAt {
		t += int64(nd.spec.Step)
	}
	return time.Unix(0, t)
}

// mapped is the node's estimate of the store's clock (ns).
func (nd *node) mapped() int64 { return nd.off.Map(nd.local()) }

// gate runs fn now, or when the node resumes if it is paused; not at all if
// the node is down.
func (nd *node) gate(fn func()) {
	if !nd.up {
		return
	}
	if nd.s.now < nd.pausedUntil {
		nd.parked = append(nd.parked, fn)
		return
	}
	fn()
}

func (nd *node) resume() {
	parked := nd.parked
	nd.parked = nil
	for _, fn := range parked {
		nd.gate(fn)
	}
}

func (nd *node) start() {
	sc := nd.s.sc
	eng, err := local.New(local.Config{Shards: 4, MaxKeys: 1 << 16, TrackSpend: true, Asks: true})
	if err != nil {
		panic(err)
	}
	nd.eng = eng
	nd.off = clock.NewOffset(nd.local())
	nd.sh = protocol.New(protocol.Config{Node: nd.id, Interval: sc.Interval, AskWait: sc.AskWait, Lease: sc.Lease,
		ActiveWindow: sc.ActiveWindow, FleetSize: sc.FleetSize, Logger: quiet, Recovery: openFor + callTimeout + sc.Interval}, eng)
	nd.sh.SetWake(func(w protocol.Wake) {
		if w == protocol.WakeBeat {
			nd.s.at(nd.s.now, func() { nd.gate(nd.beat) })
			return
		}
		nd.s.at(nd.s.now, func() { nd.gate(nd.send) })
	})
	nd.up = true
	nd.round()
}

// stop closes the node (or crashes it: it just stops).
func (nd *node) stop() {
	if !nd.up {
		return
	}
	if nd.spec.Crash && nd.s.now < nd.s.sc.Duration {
		nd.up = false
		return
	}
	nd.sh.Leave()
	nd.send()
	// Then the beat that leaves the fleet; the node is gone after.
	nd.s.at(nd.s.now+callTimeout+time.Millisecond, func() {
		if nd.open || nd.cut {
			nd.up = false
			return
		}
		nd.s.call(nd, func(now int64) any {
			return nd.s.store.Beat(now, nd.id, share.Beat{Leave: true})
		}, func(any, error) {})
		nd.up = false
	})
}

// round is the node's round: tick, heartbeat, then its ops.
func (nd *node) round() {
	if !nd.up {
		return
	}
	s := nd.s
	nd.gate(func() {
		nd.tick()
		if nd.sh.BeatDue(nd.mapped()) {
			nd.beat()
		}
	})
	jitter := time.Duration((s.rng.Float64()*0.2 - 0.1) * float64(s.sc.Interval))
	nd.roundAt = s.now + s.sc.Interval + jitter
	s.at(nd.roundAt, nd.round)
}

// tick runs the protocol's timers and schedules the next.
func (nd *node) tick() {
	next := nd.sh.Tick(nd.mapped())
	at := nd.s.now + time.Duration(next-nd.mapped())
	if at > nd.s.now && (nd.tickAt <= nd.s.now || at < nd.tickAt) && at < nd.roundAt {
		nd.tickAt = at
		nd.s.at(at, func() {
			if nd.tickAt == at {
				nd.tickAt = 0
				nd.gate(func() { nd.tick(); nd.send() })
			}
		})
	}
}

// allow is the breaker's verdict on a call now: false when open (or
// half-open with its probe in flight). It returns the generation the call
// is let through in, for result.
func (nd *node) allow() (gen int64, ok bool) {
	if !nd.open {
		return nd.gen, true
	}
	if nd.s.now < nd.openTill || nd.probing {
		return nd.gen, false
	}
	nd.probing = true // half-open: a new generation, its one probe
	nd.gen++
	return nd.gen, true
}

// result feeds the outcome of a call let through in generation gen to the
// breaker, which ignores it if it has changed state since (gobreaker's
// generations); the engine is degraded while it is not closed.
func (nd *node) result(gen int64, err error) {
	if gen != nd.gen {
		return
	}
	switch {
	case err == nil && nd.probing:
		nd.failures, nd.open, nd.probing = 0, false, false
		nd.gen++
	case err == nil:
		nd.failures = 0
	case nd.probing:
		nd.probing, nd.openTill = false, nd.s.now+openFor
		nd.gen++
	default:
		nd.failures++
		if nd.failures >= failuresToOpen {
			nd.failures, nd.open, nd.openTill = 0, true, nd.s.now+openFor
			nd.gen++
		}
	}
	nd.eng.SetDegraded(nd.open)
}

// beat sends the heartbeat.
func (nd *node) beat() {
	if nd.beating {
		nd.beatAgain = true
		return
	}
	gen, ok := nd.allow()
	if !ok {
		return
	}
	mapped := nd.mapped()
	b := nd.sh.NextBeat(mapped)
	if b == nil {
		if nd.probing && gen == nd.gen {
			nd.probing = false // no call: the probe is the next one's
		}
		return
	}
	nd.beating = true
	sent, sentAt := nd.local(), nd.s.now
	nd.s.call(nd, func(now int64) any {
		r := nd.s.store.Beat(now, nd.id, *b)
		nd.s.publish(nd, b.Contests)
		if r.New {
			nd.s.publishJoin(nd, r.Nodes, r.Now)
		}
		return &r
	}, func(reply any, err error) {
		nd.beating = false
		if !nd.up {
			return
		}
		nd.result(gen, err)
		var r *share.BeatReply
		if err == nil {
			r = reply.(*share.BeatReply)
			nd.off.Observe(sent, time.Unix(0, share.Nanos(r.Now)), nd.local())
			nd.s.rec.Beats++
		}
		nd.gate(func() {
			var resets uint64
			if nd.s.traced != "" {
				resets = nd.sh.Stats().Resets
			}
			nd.sh.BeatDone(b, r, err, nd.mapped())
			if nd.s.traced != "" && nd.sh.Stats().Resets > resets {
				nd.s.trace(nd.s.traced, "node %d starts afresh the resets it read in the registry (%d)", nd.idx, nd.sh.Stats().Resets-resets)
			}
			if err == nil && !nd.ready {
				if wait := nd.sh.StartSettle(); wait > 0 && nd.settleAt == 0 {
					nd.settleAt = nd.s.now + wait
					nd.s.at(nd.settleAt, func() { nd.gate(nd.beat) })
				} else if sentAt >= nd.settleAt {
					nd.ready = true
					nd.sh.Subscribed(nd.mapped()) // the simulated channel never drops a subscription
					for _, fn := range nd.unready {
						fn()
					}
					nd.unready = nil
				}
			}
			nd.tick()
			nd.send()
			if err == nil && (r.More || nd.beatAgain) {
				nd.beatAgain = false
				nd.beat()
			}
		})
	})
}

// send sends the ops ready, if no call of ops is in flight (else after it).
func (nd *node) send() {
	if !nd.up {
		return
	}
	if nd.sending {
		nd.sendAgain = true
		return
	}
	mapped := nd.mapped()
	ops := nd.sh.NextOps(mapped, 0)
	if len(ops) == 0 {
		return
	}
	gen, ok := nd.allow()
	if !ok {
		nd.sh.OpsDone(ops, nil, errOpen, true, mapped)
		return
	}
	nd.sending = true
	set := nd.sh.Settings()
	nd.s.call(nd, func(now int64) any {
		replies := make([]share.Reply, len(ops))
		nd.s.store.Ops(now, nd.id, set, ops, replies)
		nd.s.rec.Ops += int64(len(ops))
		var calls []share.Contest
		for i, op := range ops {
			nd.s.trace(op.Key, "node %d op %+v\n%14s -> %+v", nd.idx, op, "", replies[i])
			if r := replies[i]; r.Err == nil && r.Outcome == share.Call && r.Now == now {
				// shares.lua publishes each call it makes (not again for an
				// op answered again as it was).
				calls = append(calls, share.Contest{Key: op.Key, Limit: op.Limit, Epoch: r.Epoch, CallAt: r.Now, Expiry: r.Expiry,
					Reset: r.Reset})
			}
		}
		nd.s.publish(nd, calls)
		return replies
	}, func(reply any, err error) {
		nd.sending = false
		if !nd.up {
			return
		}
		nd.result(gen, err)
		var replies []share.Reply
		if err == nil {
			replies = reply.([]share.Reply)
		}
		nd.gate(func() {
			for i, op := range ops {
				if err == nil && op.Want > 0 {
					if nd.told == nil {
						nd.told = map[string]share.Outcome{}
					}
					nd.told[op.Key+" "+op.Limit.String()] = replies[i].Outcome
				}
			}
			nd.sh.OpsDone(ops, replies, err, nd.open, nd.mapped())
			nd.tick()
			if nd.sendAgain || err == nil {
				nd.sendAgain = false
				nd.send()
			}
		})
	})
}

// reset is the Limiter's Reset in Async mode on this node
// (hybrid.Limiter.Reset): refused while the breaker is open; else a call
// through it to the store, whose reset (the model's Reset, reset.lua) runs
// when the call arrives; on the reply, the node starts the key afresh and
// sends the reset to the fleet with its next heartbeat, at once
// (Shares.Reset with the store's time of it), which the channel brings the
// others unless it misses it (Reset.Missed). A call that fails changes
// nothing on the node. A node that has not made its first heartbeat is
// not a Limiter yet: the call waits for it, as requests do.
func (nd *node) reset(r *ResetDone) {
	if !nd.up {
		r.Err = "the node is down"
		return
	}
	var call func()
	call = func() {
		if !nd.ready {
			nd.unready = append(nd.unready, call)
			return
		}
		key := nd.s.sc.Keys[r.Key]
		lim := key.Limits[r.Limit]
		gen, ok := nd.allow()
		if !ok {
			r.Err = errOpen.Error()
			return
		}
		nd.s.call(nd, func(now int64) any {
			r.Stored, r.Ran = true, time.Duration(share.Nanos(now)-base)
			if r.Missed {
				if nd.s.missed == nil {
					nd.s.missed = map[int64]bool{}
				}
				nd.s.missed[now] = true
			}
			r.Contest = nd.s.store.(Resetter).ResetShares(now, nd.id, key.Name, lim)
			nd.s.trace(key.Name, "node %d resets %s [%v] at the store: contest %v", nd.idx, key.Name, lim, r.Contest)
			return now
		}, func(reply any, err error) {
			if !nd.up {
				return
			}
			nd.result(gen, err)
			if err != nil {
				r.Err = err.Error()
				return
			}
			nd.gate(func() {
				nd.sh.Reset(nd.mapped(), key.Name, lim, share.Nanos(reply.(int64)))
				r.Made = true
			})
		})
	}
	nd.gate(call)
}

// request decides request i under each of its key's limits.
func (nd *node) request(i int) {
	sent := nd.s.now
	var decideAll func()
	decideAll = func() {
		if !nd.ready {
			nd.unready = append(nd.unready, decideAll)
			return
		}
		req := nd.s.sc.Requests[i]
		key := nd.s.sc.Keys[req.Key]
		for li, lim := range key.Limits {
			d := &pending{nd: nd, req: i, li: li, key: key.Name, lim: lim, n: req.N, sent: sent}
			d.decide()
		}
	}
	nd.gate(decideAll)
}

// pending is one decision in progress.
type pending struct {
	nd       *node
	req, li  int
	key      string
	lim      limit.Limit
	n        int64
	sent     time.Duration
	deadline int64         // mapped ns: when it stops waiting
	asked    int64         // mapped ns: when it was first short
	seen     int64         // mapped ns: when it was first decided (0: not yet)
	first    time.Duration // when it was first decided
}

func (d *pending) done(allowed bool, src Source) { d.doneAt(allowed, src, d.nd.s.now) }

// doneAt records d decided at at (the store's time, for a request the
// store admitted itself).
func (d *pending) doneAt(allowed bool, src Source, at time.Duration) {
	nd := d.nd
	nd.s.trace(d.key, "node %d decides %s [%v] n=%d sent %v: allowed=%v (%v)", nd.idx, d.key, d.lim, d.n, d.sent, allowed, src)
	told, asked := nd.told[d.key+" "+d.lim.String()]
	nd.s.rec.Decisions = append(nd.s.rec.Decisions, Decision{Req: d.req, Limit: d.li, Node: nd.idx, Sent: d.sent,
		Seen: time.Duration(d.seen - base), First: d.first, At: at, N: d.n, Allowed: allowed, Source: src, Told: told, Asked: asked && d.asked != 0})
}

// decide decides d as the hybrid limiter's Async path does.
func (d *pending) decide() {
	nd := d.nd
	now := nd.mapped()
	if d.seen == 0 {
		d.seen, d.first = now, nd.s.now
	}
	if nd.open {
		d.degraded(now)
		return
	}
	res, err := nd.eng.AllowN(now, d.key, d.lim, d.n)
	switch {
	case err == nil:
		d.done(res.Allowed, Local)
		return
	case errors.Is(err, local.ErrFaulted):
		d.degraded(now)
		return
	case !errors.Is(err, local.ErrShort):
		nd.s.rec.Errors = append(nd.s.rec.Errors, fmt.Sprintf("node %d %s [%v]: %v", nd.idx, d.key, d.lim, err))
		return
	}
	if d.deadline == 0 {
		d.deadline, d.asked = now+int64(nd.s.sc.AskWait), now
	}
	_, refuse, _ := nd.sh.Short(now, d.asked, d.key, d.lim, d.n, d.deadline, func(w *protocol.Waiter) {
		// Told under the protocol's lock: picked up as an event at once.
		nd.s.at(nd.s.now, func() { nd.gate(func() { d.resume(w) }) })
	})
	if refuse {
		_, _ = nd.eng.Refuse(now, d.key, d.lim, d.n)
		d.done(false, Remote)
	}
}

// resume continues d once w has its verdict.
func (d *pending) resume(w *protocol.Waiter) {
	nd := d.nd
	v, at := w.Verdict()
	now := nd.mapped()
	switch v {
	case protocol.Retry:
		if now >= d.deadline {
			_, _ = nd.eng.Refuse(now, d.key, d.lim, d.n)
			d.done(false, Remote)
			return
		}
		d.decide()
	case protocol.Unreachable:
		d.degraded(now)
	case protocol.Admitted:
		// The store counts it when it charged it (when it was asked for,
		// or when the pool first had the room).
		d.doneAt(true, Remote, time.Duration(at-base))
	default:
		_, _ = nd.eng.Refuse(now, d.key, d.lim, d.n)
		d.done(false, Remote)
	}
}

// degraded decides d under the Conservative fallback.
func (d *pending) degraded(now int64) {
	res, err := d.nd.eng.AllowDegraded(now, d.key, d.lim, d.n)
	if err != nil {
		d.nd.s.rec.Errors = append(d.nd.s.rec.Errors, fmt.Sprintf("node %d %s [%v] degraded: %v", d.nd.idx, d.key, d.lim, err))
		return
	}
	d.done(res.Allowed, Degraded)
}
