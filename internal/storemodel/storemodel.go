// Package storemodel is a Go model of the store's side of Async mode's share
// protocol: what remote's scripts (shares.lua, registry.lua) do in Redis, op
// for op, in the same integer and float64 arithmetic, on an explicit clock.
// The simulation runs it in place of Redis; a conformance test holds it to
// the real scripts on a real redis-server, answer for answer.
//
// It is a test tool: not safe for concurrent use, nothing is bounded.
package storemodel

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// StaleSeqAhead is how far (µs) the last op's seq may be ahead of the
// store's clock for an earlier op to be taken as a late copy (shares.lua's
// STALE): a node's seq runs ahead of the store's clock by its offset's
// error at most, far less than this; a clock that stepped back further
// makes every earlier op new again.
const StaleSeqAhead = 1_000_000

// Model is the store: every contested key's hash, and the fleet's keys.
type Model struct {
	// ActiveWindow is how long a node stays in the fleet after its last
	// beat (µs).
	ActiveWindow int64

	keys map[kl]*Hash
	// resets are the resets of keys with no contest then, each kept an
	// active window (reset.lua's rs and rx), until a contest takes it.
	resets  map[kl]mark
	members map[string]int64 // node → µs of its last beat
	entries map[string]*entry
	stamp   int64 // the last change stamp handed out

	// Leaks describes the first ops after which a hash's shares (the
	// pool, the unknown, the reserved and every grant and hold) added up
	// to less than the whole limit: share lost for good, which the fleet
	// can never admit again. The simulation fails a scenario with any.
	Leaks []string

	// Branches counts the ops that took each of the script's rarer
	// branches: the conformance test, which holds the scripts to this
	// model, says how often it met each.
	Branches Branches
}

// Branches counts ops by the rarer branches of the share script they took.
type Branches struct {
	Backdated      int // a new contest's pool serving from the request's time
	GoneLapsed     int // a grant taken back from a node gone from the fleet
	RefilledCalls  int // a home whose refill came called past the back-off
	LastAskerHomes int // a served request made no home for another node's ask, which the records no longer show
	ServedHomes    int // a served request made a home
	PartServed     int // the pool served part of what waited
	PooledShadow   int // a new pooled contest's pool starting at its creator's shadow (it decided the key before it was pooled)
	ReportedSpend  int // a pooled contest made by a report of that spend alone (the creator wants nothing)
	JoinedSpend    int // a pooled contest charged with what a node joining it admitted alone before the fleet grew
	HeardCalls     int // an ask told no room within the call's window: every node holding a grant had answered
	PoolSoon       int // an ask told to wait though every node holding a grant had answered: the pool's refill brings the room within the window
	BeforeReset    int // what returned fresh for being from before the contest's last reset: an op of a node that had not heard of it, an answer never got
}

// Add adds o's counts to b's.
func (b *Branches) Add(o Branches) {
	b.Backdated += o.Backdated
	b.GoneLapsed += o.GoneLapsed
	b.RefilledCalls += o.RefilledCalls
	b.LastAskerHomes += o.LastAskerHomes
	b.ServedHomes += o.ServedHomes
	b.PartServed += o.PartServed
	b.PooledShadow += o.PooledShadow
	b.ReportedSpend += o.ReportedSpend
	b.JoinedSpend += o.JoinedSpend
	b.HeardCalls += o.HeardCalls
	b.PoolSoon += o.PoolSoon
	b.BeforeReset += o.BeforeReset
}

// kl names a (key, limit).
type kl struct {
	key string
	lim limit.Limit
}

// Hash is one contested key's state in the store.
type Hash struct {
	Epoch  int64 // µs the contest began
	Expiry int64 // µs the hash expires at (PEXPIREAT)
	// Pool is the share nobody holds, and PoolState its state as of PoolAt.
	Pool      int64
	PoolState share.State
	PoolAt    int64
	// Joins is how many nodes the contest still waits to hear from, and
	// Reserved the even splits kept outside the pool for them: each takes
	// what it says it holds out of it, and what the last leaves goes back
	// to the pool as spent.
	Joins, Reserved int64
	// CallAt is the µs of the last call (0: none); Quiet is when the next
	// may be made, after Fails calls in a row came back without the room.
	CallAt, Quiet, Fails int64
	// Unknown is share held by nodes the store lost track of (a rebuilt
	// contest), returned to the pool as wholly spent at UnknownUntil.
	Unknown, UnknownUntil int64
	// ExNode is the node that made the contest from its even split, and
	// ExSince the start of its shadow then (µs): while every node that
	// joined had spent nothing since (ExOK), the creator's shadow is the
	// whole key's exact state, and its first growth takes that state.
	ExNode  string
	ExSince int64
	ExOK    bool
	// LastAsker is the node whose op last asked for room, at LastAskAt
	// (µs): a served request makes no home where another node asked
	// within half a home lease, and this says so without the records.
	LastAsker string
	LastAskAt int64
	// ResetAt is the µs of the contest's last reset (Reset; 0: none): an op
	// of a node that has not heard of it (share.Op.ResetHeard) carries
	// state from before it, which returns to the pool fresh.
	ResetAt int64
	// Records holds each node's record.
	Records map[string]*Record
}

// Record is one node's share of a contested key.
type Record struct {
	Grant    int64
	LeaseEnd int64 // µs
	// Growth is the last growth sent to the node, with the pool's state
	// then (GrowthAt, the op's µs): if the node reports without it, the
	// answer was lost and it goes back to the pool as it left.
	Growth      int64
	GrowthState share.State
	GrowthAt    int64
	// Seq is the last op applied, and Outcome and Until what it was told:
	// the same op again is answered again as it was.
	Seq              int64
	Outcome          share.Outcome
	Until            int64
	Served, ServedAt int64
	// Hold is the even split held back for the node after its grant
	// lapsed unreported (it may be deciding degraded in one), until
	// HoldUntil or until it reports what it holds.
	Hold, HoldUntil int64
	// Heard is the latest call the node had answered with nothing to spare
	// by its last op (share.Op.Heard; 0: none).
	Heard int64
}

// entry is a registry entry.
type entry struct {
	epoch, callAt, expiry, reset, changed int64
}

// New returns an empty store whose fleet forgets a node activeWindow µs
// after its last beat.
func New(activeWindow int64) *Model {
	m := &Model{ActiveWindow: activeWindow}
	m.Restart()
	return m
}

// Restart empties the store, as a Redis that restarted without its data or
// was flushed.
func (m *Model) Restart() {
	m.keys = make(map[kl]*Hash)
	m.resets = make(map[kl]mark)
	m.members = make(map[string]int64)
	m.entries = make(map[string]*entry)
	m.stamp = 0
}

// Delete removes one key's hash, as a key evicted or deleted.
func (m *Model) Delete(key string, lim limit.Limit) {
	delete(m.keys, kl{key, lim})
	delete(m.resets, kl{key, lim})
}

// mark is a reset of a key with no contest (µs), kept until until.
type mark struct{ at, until int64 }

// Reset is reset.lua on (key, lim)'s contest at now (µs): its pool's state
// made fresh, the call's back-off and the creator's shadow forgotten, and
// the reset's time kept (ResetAt). It reports whether there was a contest.
func (m *Model) Reset(now int64, key string, lim limit.Limit) bool {
	p, ok := share.ParamsOf(lim)
	if !ok {
		return false
	}
	h := m.Hash(now, key, lim)
	if h == nil {
		// No contest: the reset is kept an active window all the same,
		// for the contest a node that has not heard of it may make with
		// what it admitted alone before it.
		m.resets[kl{key, lim}] = mark{now, now + m.ActiveWindow}
		return false
	}
	h.PoolState, h.PoolAt = p.Decay(share.State{}, 0, now), now
	h.ExOK = false
	h.CallAt, h.Quiet, h.Fails = 0, 0, 0
	h.ResetAt = now
	return true
}

// Hash returns (key, lim)'s hash as of now, or nil.
func (m *Model) Hash(now int64, key string, lim limit.Limit) *Hash {
	h := m.keys[kl{key, lim}]
	if h != nil && h.Expiry <= now {
		delete(m.keys, kl{key, lim})
		return nil
	}
	return h
}

// Keys returns how many contested keys the store holds as of now.
func (m *Model) Keys(now int64) int {
	n := 0
	for k, h := range m.keys {
		if h.Expiry <= now {
			delete(m.keys, k)
			continue
		}
		n++
	}
	return n
}

// Op applies node's op at now (µs) and returns the reply, as shares.lua
// does for one key.
func (m *Model) Op(now int64, node string, set share.Settings, op share.Op) share.Reply {
	p, ok := share.ParamsOf(op.Limit)
	if !ok {
		return share.Reply{Now: now, Outcome: share.Ended}
	}
	k := kl{op.Key, op.Limit}
	ended := m.keys[k] != nil && m.keys[k].Expiry <= now // expired as the op came: not lost
	h := m.Hash(now, op.Key, op.Limit)
	rs := int64(0) // a reset of the key with no contest, for the contest this op may make
	if mk, ok := m.resets[k]; ok && h == nil && !ended && mk.until > now {
		rs = mk.at
	}
	var before int64 = -1
	if h != nil {
		before = h.Pool + h.Unknown + h.Reserved + granted(h)
	}
	r := apply(p, h, ended, rs, now, node, set, op, &m.Branches)
	if r.hash != nil && h == nil {
		delete(m.resets, k) // the contest keeps it now (rs), and goes with it
	}
	if r.hash == nil {
		delete(m.keys, k)
	} else {
		m.keys[k] = r.hash
		nh := r.hash
		if total := nh.Pool + nh.Unknown + nh.Reserved + granted(nh); total < share.One && len(m.Leaks) < 10 {
			m.Leaks = append(m.Leaks, fmt.Sprintf("%s [%v] at %d: node %s op %+v left the shares adding up to %d of %d (before: %d); reply %+v",
				op.Key, op.Limit, now, node, op, total, share.One, before, r.reply))
		}
	}
	return r.reply
}

// result is what applying an op leaves: the hash (nil: none) and the reply.
type result struct {
	hash  *Hash
	reply share.Reply
}

// apply is one op on hash h (nil: absent; ended: it expired as the op
// came; rs: the key was reset then, with no contest) at now. It is the
// script's logic, step for step.
func apply(p share.Params, h *Hash, ended bool, rs, now int64, node string, set share.Settings, op share.Op, br *Branches) result {
	reply := share.Reply{Now: now}
	if h != nil {
		reply.Reset = h.ResetAt
	}
	// A node that has not heard of the key's last reset (it hears through
	// the registry, a beat or so later) sends its state from before it.
	before := rs > op.ResetHeard
	if h != nil {
		before = h.ResetAt > op.ResetHeard
	}
	unspent := p.Decay(share.State{}, 0, now) // a state nothing was spent of: what a reset makes
	held := clamp(op.Held, 0, share.One)
	keep := clamp(op.Keep, 0, held)
	if op.Leave {
		keep = 0
	}
	state := p.Decay(op.State, op.At, now)

	// The same op again (its answer was lost, or a retry crossed it):
	// answered as it was, whatever contest it names. Applied again, an op
	// that rebuilt a lost contest would count the node's grant twice.
	if rec := recordOf(h, node); rec != nil && op.Seq != 0 && rec.Seq == op.Seq {
		return result{h, replay(h, rec, reply)}
	}
	// An earlier op than the last one answered is a copy that came late (a
	// call abandoned at its timeout that Redis ran after the node's resend
	// was answered and its next op sent: a node sends a key's next op only
	// once the last is answered), or, should the store's clock have stepped
	// back, a new process under the node's name. Applied as nothing and
	// answered Wait, nothing granted or served: nobody reads a late copy's
	// answer, and a new process asks again with a later seq. (Answered as
	// the last op was, a new process admitted on the old one's Served.)
	// Unless the last op's seq is ahead of the store's clock by more than
	// StaleSeqAhead.
	if rec := recordOf(h, node); rec != nil && op.Seq != 0 && op.Seq < rec.Seq && rec.Seq <= now+StaleSeqAhead {
		reply.Outcome, reply.Epoch, reply.Expiry = share.Wait, h.Epoch, h.Expiry
		return result{h, reply}
	}

	// 1. Which contest.
	fresh := false // the node was not in this contest: its op is its join
	switch {
	case h == nil && op.Epoch != 0 && held > 0 && !op.Leave:
		// The node holds a grant of a contest the store lost: rebuilt from
		// it, believed; what the others held is unknown until a lease has
		// passed, then taken as wholly spent.
		h = &Hash{Epoch: now, PoolAt: now, PoolState: p.Decay(share.State{}, 0, now), Records: map[string]*Record{},
			Unknown: share.One - held, UnknownUntil: now + set.Lease + set.Recovery, ResetAt: rs}
		reply.Reset = rs
		h.Records[node] = &Record{Grant: held, LeaseEnd: now + set.Lease} // believed, and held until it reports again
		reply.Lost = true
	case h == nil && op.Want <= 0 && !carriesSpend(p, op) || h == nil && op.Leave:
		// Nothing to rebuild and nothing wanted (a call the node answers
		// after its contest ended, say): the contest ended.
		reply.Outcome = share.Ended
		return result{nil, reply}
	case h == nil:
		// A new contest. Every other node of the fleet holds an even split,
		// unless the key is pooled; the creator holds what it says.
		if op.Want <= 0 {
			br.ReportedSpend++ // carriesSpend: a report of what it admitted alone
		}
		h = &Hash{Epoch: now, PoolAt: now, PoolState: p.Decay(share.State{}, 0, now), Records: map[string]*Record{}, ResetAt: rs}
		reply.Reset = rs
		if op.AskedAt > 0 && op.AskedAt < now {
			// A new contest's pool is the part of the limit nobody held:
			// as full when the request waiting on it was made (up to a
			// call window ago) as now, and the pool serves it then, as an
			// exact limiter would.
			t0 := max(op.AskedAt, now-set.CallWindow)
			h.PoolState, h.PoolAt = p.Decay(share.State{}, 0, t0), t0
			br.Backdated++
		}
		fleet := int64(max(op.Fleet, 1))
		if !op.Pooled {
			h.Joins = fleet - 1
			h.Reserved = h.Joins * share.Even(int(fleet))
		} else if op.Epoch == 0 && p.Kind == share.Bucket && op.Shadow > 0 && !before {
			// A pooled key no node decides in an even split now, but its
			// creator may have before the fleet grew (one over a smaller
			// fleet held a request): what it admitted so is spent, and its
			// shadow (as of the op's time) holds it. The pool starts no
			// fuller than that, or the fleet admits the limit again. (The
			// creator asks, or reports that spend alone: carriesSpend.)
			if s := p.Decay(share.State{Level: op.Shadow}, op.At, h.PoolAt); s.Level > h.PoolState.Level {
				h.PoolState.Level = s.Level
				br.PooledShadow++
			}
		}
		if op.Epoch != 0 && !ended {
			// It held nothing of a contest that is gone before the node
			// saw it end (a node forgets the contest's epoch once its
			// expiry passed): lost (deleted, evicted, a restart) with
			// what its pool had spent. The pool starts wholly spent, as a
			// lost contest's does. Not one that expired as the op came
			// (sent before its expiry): its grants had lapsed and its
			// pool refilled, or it would not have expired (extend).
			held, keep = 0, 0
			h.PoolState, h.PoolAt = p.Spent(now), now
			reply.Lost = true
		}
		h.Pool = share.One - h.Reserved - held
		h.Records[node] = &Record{Grant: held, LeaseEnd: now + set.Lease} // believed, and held until it reports again
		if op.Epoch == 0 && !op.Pooled && op.Shadow >= 0 && !before {
			h.ExNode, h.ExSince, h.ExOK = node, op.ShadowSince, true
		}
	case op.Epoch != h.Epoch && op.Epoch != 0 && held > 0 && (h.Joins == 0 || h.Records[node] != nil):
		// A grant of an earlier contest the store lost: believed, out of
		// the unknown first, else out of the pool. (While the contest
		// waits for joins, a node it has not heard from joins with it,
		// below: else the contest would wait for it for ever.)
		take := min(held, h.Unknown)
		h.Unknown -= take
		h.Pool -= held - take
		rec := h.Records[node]
		if rec == nil {
			rec = &Record{}
			h.Records[node] = rec
		}
		rec.Grant, rec.LeaseEnd = held, now+set.Lease
		reply.Lost = true
	case op.Epoch != h.Epoch:
		fresh = true
	}

	// What a node that has not heard of the contest's last reset gives back
	// returns fresh, as the reset made the pool, and what it admitted alone
	// charges nothing. (Given as it was, a spent state spent the fresh pool
	// again: the key stayed exhausted for its period.)
	given, heard := state, op.Heard
	if before {
		// (and a call it answers with nothing to spare was answered of
		// that state: the asker waits for its answer of the fresh one)
		given, heard = unspent, 0
		br.BeforeReset++
	}
	// spentAt: what a share spent at t returns as now; fresh when t is
	// before the contest's last reset (it lapsed, unreported, before the
	// reset made the share nobody held fresh).
	spentAt := func(t int64) share.State {
		if t <= h.ResetAt {
			return unspent
		}
		return p.Decay(p.Spent(t), t, now)
	}

	// A store that lost writes it had answered (its record of the node is
	// older than the last answer the node applied: a failover to a replica
	// they had not reached): the pool's state may be older than what was
	// spent from it, so it is taken as wholly spent now, as in a contest
	// the store lost. The node keeps no more than the store's record of
	// it: what the lost writes granted it may have gone to another node
	// since, from the same pool (two masters for a while, in a failover).
	if rec := h.Records[node]; !fresh && op.Applied != 0 && op.Epoch == h.Epoch && (rec == nil || rec.Seq < op.Applied) {
		h.PoolState, h.PoolAt = p.Spent(now), now
		recorded := int64(0)
		if rec != nil {
			recorded = rec.Grant + rec.Hold
		}
		held = min(held, recorded)
		keep = min(keep, held)
		reply.Lost = true
	}

	// 2. What lapsed: back to the pool as wholly spent, but for an even
	// split, held back until the node could have recovered: a node that
	// did not renew may be deciding degraded in one.
	// A node gone from the fleet uses none of its grants from when it left:
	// what it has not reported since lapses then.
	even := share.Even(max(op.Fleet, 1))
	gone := make(map[string]int64, len(set.Gone))
	for _, g := range set.Gone {
		gone[g.Node] = g.At
	}
	for _, id := range sortedNodes(h.Records) {
		rec := h.Records[id]
		ends := rec.LeaseEnd
		if left, ok := gone[id]; ok && id != node && rec.GrowthAt < left && left < ends {
			ends = left
			if rec.Grant > 0 && ends <= now {
				br.GoneLapsed++
			}
		}
		if rec.Grant > 0 && ends <= now {
			hold := min(rec.Grant, even)
			give(p, h, now, rec.Grant-hold, spentAt(ends))
			rec.Hold += hold
			rec.HoldUntil = max(rec.HoldUntil, ends+set.Recovery)
			rec.Grant, rec.Growth = 0, 0
		}
		if rec.Hold > 0 && rec.HoldUntil <= now {
			give(p, h, now, rec.Hold, spentAt(rec.HoldUntil))
			rec.Hold = 0
		}
	}
	if h.Unknown > 0 && h.UnknownUntil <= now {
		give(p, h, now, h.Unknown, spentAt(h.UnknownUntil))
		h.Unknown = 0
	}

	// 3. The node's record against what it says it holds.
	rec := h.Records[node]
	switch {
	case rec == nil && fresh:
		// Its join: an even split (or nothing), out of what was reserved
		// for it; more than that (a node the creator did not count, say)
		// out of the pool.
		rec = &Record{Grant: held}
		h.Records[node] = rec
		take := int64(0)
		if h.Joins > 0 {
			take = min(held, h.Reserved)
			h.Reserved -= take
			h.Joins--
			if h.Joins == 0 && h.Reserved > 0 {
				give(p, h, now, h.Reserved, p.Spent(now)) // splits nobody claimed: spent, for all the store knows
				h.Reserved = 0
			}
		}
		if held > take {
			over(h, held-take)
			reply.Over = true
		}
		if held > 0 && (op.Full < 0 || op.Full > h.ExSince || keep > 0) {
			h.ExOK = false // it spent during the creator's shadow, or keeps some
		}
		if carriesSpend(p, op) && h.Pool > 0 && !before {
			// It decided the key alone, in an even split the fleet's growth
			// pooled, and another node made the contest first: the pool is
			// charged with what it admitted so. (A pool a home holds all
			// of is not: the home decides alone.)
			chargeSpend(p, h, now, op)
			br.JoinedSpend++
		}
	case rec == nil:
		rec = &Record{}
		h.Records[node] = rec
		fallthrough
	default:
		if carriesSpend(p, op) && rec.Grant == 0 && rec.Hold == 0 && rec.GrowthAt > 0 && op.ShadowSince > rec.GrowthAt && h.Pool > 0 && !before {
			// It was in the contest (an op of its was answered here: not
			// the record this op's contest was just made with), held
			// nothing, went back to its even split (the expiry it knew of
			// passed while another node kept the contest alive) and decided
			// the key alone since its last op here (its shadow began after
			// it): charged, as a join.
			chargeSpend(p, h, now, op)
			br.JoinedSpend++
		}
		rec.Grant += rec.Hold // what was held back for it: what it says it holds settles it
		rec.Hold = 0
		switch {
		case held > rec.Grant:
			over(h, held-rec.Grant)
			reply.Over = true
		case held < rec.Grant:
			d := rec.Grant - held
			switch {
			case rec.Growth > 0 && d == rec.Growth && rec.GrowthAt < h.ResetAt:
				give(p, h, now, d, unspent) // an answer it never got, of the pool before the reset
				br.BeforeReset++
			case rec.Growth > 0 && d == rec.Growth:
				give(p, h, now, d, p.Decay(rec.GrowthState, rec.GrowthAt, now)) // an answer it never got
			default:
				give(p, h, now, d, p.Spent(now))
			}
		}
		rec.Grant = held
	}
	rec.Growth = 0
	if op.Owed {
		owed(h, node, int64(max(op.Fleet, 1)), now, set)
	}

	// The creator's shadow, once every node has joined having spent
	// nothing during it: its split goes back to the pool, which takes the
	// shadow's state, the whole key's exact state.
	if h.ExOK && node == h.ExNode && h.Joins == 0 && op.Shadow >= 0 && op.ShadowSince >= h.ExSince && !op.Leave &&
		held == rec.Grant && h.Unknown == 0 && !holders(h, node) {
		h.ExOK = false
		h.Pool += held
		h.PoolState, h.PoolAt = p.Decay(share.State{Level: op.Shadow}, op.At, now), now
		rec.Grant, held, keep = 0, 0, 0
		reply.Replace = true
	} else if node == h.ExNode && op.Epoch == h.Epoch && h.Joins == 0 {
		h.ExOK = false // the chance has passed
	}

	// 4. What it gives back. While the pool owes share (the store believed
	// nodes holding more than the limit in all: grants rebuilt after it
	// lost a contest, next to even splits decided in while degraded), a
	// node holding more than an even split pays the debt from the excess:
	// else every renewal would keep the fleet over the limit.
	if h.Pool < 0 && keep > even {
		keep = max(keep+h.Pool, even)
	}
	if held > keep {
		give(p, h, now, held-keep, given)
	}
	rec.Grant = keep
	if op.Leave {
		if total := h.Pool + h.Unknown + h.Reserved + granted(h); total > share.One {
			h.Pool -= total - share.One
		}
		rec.Seq, rec.Outcome, rec.GrowthAt, rec.Heard = op.Seq, share.Done, now, heard
		reply.Epoch = h.Epoch
		reply.Expiry = extend(p, h, now, set.Lease)
		return result{h, reply}
	}

	// 5. What it wants: room for Want in its share, grown from the pool.
	pool := p.Decay(h.PoolState, h.PoolAt, now)
	growth := int64(0)
	switch {
	case op.Want > 0 && op.Serve && keep == 0:
		// Served from the pool, the node holding nothing of it, and charged
		// when the node asked (no earlier than the pool's state): a
		// request counts at the time it was made, not a round trip late.
		at := min(max(op.AskedAt, h.PoolAt), now)
		if h.Pool > 0 {
			if t := p.When(h.Pool, op.Want, p.Decay(h.PoolState, h.PoolAt, at), at); t >= 0 && t <= now {
				x := p.Decay(h.PoolState, h.PoolAt, t)
				h.PoolState, h.PoolAt = p.Spend(x, h.Pool, op.Want, t), t
				pool = p.Decay(h.PoolState, h.PoolAt, now)
				reply.Served, reply.ServedAt = op.Want, t
				h.ExOK = false // the pool spent: the creator's shadow no longer holds everything
				break
			}
			// The pool has room for some of the requests that wait, not all:
			// as many whole ones as it holds, now, the oldest first (the node
			// admits its waiters in order while what was served covers them).
			// Serving all or none refused every request of a burst the pool
			// held all but one of, and left the room to nobody. Requests of
			// different weights (Each zero) are served all or none: the store
			// cannot tell where one ends.
			if w := wholeRequests(min(p.Room(h.Pool, pool, now), op.Want-op.Each), op.Each); w > 0 && p.Kind != share.Meter {
				br.PartServed++
				h.PoolState, h.PoolAt = p.Spend(pool, h.Pool, w, now), now
				pool = p.Decay(h.PoolState, h.PoolAt, now)
				reply.Served, reply.ServedAt = w, now
				h.ExOK = false
			}
		}
		reply.Outcome, reply.Until = short(p, h, now, node, set, br, p.When(h.Pool, nextWant(op, reply.Served), pool, now))
		if reply.Outcome == share.NoRoom && !holders(h, node) {
			reply.Until, reply.Exact = until(h, p, h.Pool, nextWant(op, reply.Served), pool, now, set, op.Pooled) // the pool's own refill
		}
	case op.Want > 0:
		d := p.Grow(op.Want, keep, state, pool, now)
		if d > 0 && d <= h.Pool {
			growth = d
			break
		} else if d == 0 {
			break
		}
		if h.Pool > 0 && p.Room(h.Pool, pool, now) > 0 {
			growth = h.Pool // what there is
		}
		if !p.Holds(op.Want, keep, state, growth, pool, now) {
			reply.Outcome, reply.Until = short(p, h, now, node, set, br, p.When(h.Pool, op.Want, pool, now))
			if reply.Outcome == share.NoRoom && !holders(h, node) {
				// It holds all there is: the room comes from its own refill.
				reply.Until, _ = until(h, p, keep+growth, op.Want, p.Merge(keep, state, growth, pool), now, set, false)
			}
		}
	}
	// Nobody else holds any of it, nor asked for any within a lease: all
	// of it here, one bucket holding the whole limit, exactly as one exact
	// limiter would; with no room too (the node then refuses alone, exactly,
	// until its own refill). The key's demand has a home.
	// A request the pool served makes a home only when no other node asked
	// within half a home lease: sparse demand that moves between the nodes
	// is served, a request an op, rather than called from one home to the
	// next.
	since := now - set.Lease
	if op.Serve {
		since = now - max(set.HomeLease, set.Lease)/2
	}
	askedLast := op.Serve && h.LastAsker != "" && h.LastAsker != node && h.LastAskAt > since
	lone := alone(h, node) && (reply.Outcome == share.Done && !op.Serve || !askedLast && !askedElsewhere(h, node, since))
	if op.Serve && op.Need > 0 && alone(h, node) && askedLast && !askedElsewhere(h, node, since) {
		br.LastAskerHomes++
	}
	if op.Need > 0 && h.Pool > growth && (reply.Outcome == share.Done || reply.Outcome == share.NoRoom && lone) {
		if lone {
			growth = h.Pool
			if reply.Outcome == share.NoRoom {
				// Its room comes from the whole limit's refill now.
				reply.Until, reply.Exact = until(h, p, keep+growth, nextWant(op, reply.Served), p.Merge(keep, state, growth, pool), now, set, op.Pooled)
			}
		} else if !op.Serve && op.Need > keep+growth {
			growth += min(op.Need-keep-growth, h.Pool-growth)
		}
	}
	if op.Want > 0 && reply.Outcome == share.Done {
		h.Fails, h.Quiet, h.CallAt = 0, 0, 0 // room found: any call made is answered
	}
	if growth > 0 {
		if op.Serve {
			br.ServedHomes++
		}
		if node != h.ExNode {
			h.ExOK = false
		}
		h.Pool -= growth
		rec.Grant += growth
		rec.Growth, rec.GrowthState = growth, pool
	}
	if op.Want > 0 {
		h.LastAsker, h.LastAskAt = node, now
	}
	rec.GrowthAt, rec.Seq, rec.Outcome, rec.Until, rec.Served, rec.ServedAt = now, op.Seq, reply.Outcome, reply.Until, reply.Served, reply.ServedAt
	rec.Heard = heard
	lease := set.Lease
	if rec.Grant >= share.One {
		lease = max(set.HomeLease, set.Lease) // a home
	}
	if rec.Grant > 0 {
		rec.LeaseEnd = now + lease
	}
	// The shares never add up to more than the whole limit: a node that
	// joined with a larger even split than the contest counted (it saw a
	// smaller fleet) is believed, and the pool owes the difference.
	if total := h.Pool + h.Unknown + h.Reserved + granted(h); total > share.One {
		h.Pool -= total - share.One
	}
	reply.Epoch, reply.Grant, reply.Growth, reply.Pool, reply.LeaseEnd = h.Epoch, rec.Grant, growth, pool, rec.LeaseEnd
	reply.Expiry = extend(p, h, now, lease)
	return result{h, reply}
}

// short decides what a node whose want the pool cannot hold does: wait for
// the nodes still to join (calling them first), call the others to give
// back what they do not need at once, wait for a call's answers, or, once a
// call came back without the room, refuse alone until the next call may be
// made: quiet for a cooldown that doubles while calls keep failing (a key
// over its limit costs one call a cooldown, not one a request).
//
// soon is when the pool alone has room for the request (µs; -1: never):
// a call every holder has answered still waits out its window if the
// pool's own refill brings the room within it. (Not the asker's own share
// with the pool: on a key over its limit the node's own refill always
// comes within the window, and its own next requests take it.)
func short(p share.Params, h *Hash, now int64, node string, set share.Settings, br *Branches, soon int64) (share.Outcome, int64) {
	refills := soon >= 0 && soon < h.CallAt+set.CallWindow // the pool alone has the room within the call's window
	others := false
	for id, rec := range h.Records {
		if id != node && (rec.Grant > 0 || rec.Hold > 0) {
			others = true
			break
		}
	}
	switch {
	case h.Joins > 0 && h.CallAt == 0:
		// The contest's start: every node must hear of it and join.
		h.CallAt = now
		return share.Call, 0
	case h.Joins > 0:
		return share.Wait, 0
	case !others:
		// This node holds all there is: its own refill is the fleet's.
		return share.NoRoom, now + set.Cooldown
	case h.CallAt != 0 && now-h.CallAt < set.CallWindow && !heard(h, node):
		return share.Wait, 0 // the call's answers are still coming
	case h.CallAt != 0 && now-h.CallAt < set.CallWindow && refills:
		br.PoolSoon++
		return share.Wait, 0 // every holder answered; the pool's refill is coming
	case h.CallAt != 0 && now-h.CallAt < callWait*set.CallWindow && !answered(h, node):
		return share.Wait, 0 // a node holding a grant has not answered the call yet
	case now >= h.Quiet:
		failed := h.CallAt != 0 && h.CallAt >= h.Quiet && now-h.CallAt < callWait*set.CallWindow
		if failed && now-h.CallAt < set.CallWindow {
			br.HeardCalls++
		}
		if failed && refilled(h, node, now) {
			br.RefilledCalls++
		} else if failed {
			// Every node holding a grant answered the last call (or was
			// given its time), and the room did not come: the fleet has
			// none to give until later.
			h.Fails = min(h.Fails+1, maxFails)
			h.Quiet = now + set.Cooldown<<h.Fails
			return share.NoRoom, h.Quiet
		}
		h.CallAt = now
		return share.Call, 0
	case refilled(h, node, now):
		br.RefilledCalls++
		// A home told no room until an instant now past (it refuses alone
		// until its refill) has its room again, which no call since asked
		// of it: called, whatever the quiet.
		h.CallAt = now
		return share.Call, 0
	}
	return share.NoRoom, h.Quiet
}

// callWait is how many call windows an ask waits for the nodes holding
// grants to answer a call before the call counts as failed.
const callWait = 4

// refilled reports whether a node but node holds the whole key (a home) and
// was last told it had no room until an instant now past, with no call
// since.
func refilled(h *Hash, node string, now int64) bool {
	for id, rec := range h.Records {
		if id != node && rec.Grant >= share.One && rec.Outcome == share.NoRoom && rec.Until <= now && rec.GrowthAt >= h.CallAt {
			return true
		}
	}
	return false
}

// heard reports whether every node but node that holds a grant has
// answered the last call with nothing to spare: its last op was made after
// it heard the call while it refused requests alone for want of room
// (share.Op.Heard), or asked for room after the call and was not given it.
// No room will come from them: the asker is told so, rather than wait out
// the call's window.
func heard(h *Hash, node string) bool {
	for id, rec := range h.Records {
		if id != node && rec.Grant > 0 && rec.Heard < h.CallAt && (rec.GrowthAt < h.CallAt || rec.Outcome == share.Done) {
			return false
		}
	}
	return true
}

// answered reports whether every node but node that holds a grant has
// reported since the last call.
func answered(h *Hash, node string) bool {
	for id, rec := range h.Records {
		if id != node && rec.Grant > 0 && rec.GrowthAt < h.CallAt {
			return false
		}
	}
	return true
}

// recordOf is node's record in h (nil: h or the record absent).
func recordOf(h *Hash, node string) *Record {
	if h == nil {
		return nil
	}
	return h.Records[node]
}

// replay is the answer rec's op had, sent again.
func replay(h *Hash, rec *Record, reply share.Reply) share.Reply {
	reply.Outcome, reply.Until, reply.Epoch, reply.Grant, reply.LeaseEnd = rec.Outcome, rec.Until, h.Epoch, rec.Grant, rec.LeaseEnd
	reply.Growth, reply.Pool, reply.Now, reply.Served, reply.ServedAt = rec.Growth, rec.GrowthState, rec.GrowthAt, rec.Served, rec.ServedAt
	reply.Expiry = h.Expiry
	return reply
}

// granted is the sum of the records' grants.
func granted(h *Hash) int64 {
	g := int64(0)
	for _, rec := range h.Records {
		g += rec.Grant + rec.Hold
	}
	return g
}

// holders reports whether a node other than node holds a grant of h.
func holders(h *Hash, node string) bool {
	for id, rec := range h.Records {
		if id != node && (rec.Grant > 0 || rec.Hold > 0) {
			return true
		}
	}
	return false
}

// nextWant is what the next of the requests op waits for weighs, once
// served of them were: the oldest's weight when they weigh the same
// (op.Each, Serve ops only), else all of them. A refusal until room for all
// of them (a burst of 1 never holds 2) would refuse the next one past its
// room.
func nextWant(op share.Op, served int64) int64 {
	w := op.Want - served
	if op.Serve && op.Each > 0 && w > op.Each {
		return op.Each
	}
	return w
}

// until is when share g of h in state x has room for w, at the earliest
// now, and a cooldown from now when it never will (shares.lua's untilOf);
// and whether that instant is exact: the share will have the room, and
// nothing else can bring it sooner. Not while h holds shares back that will
// join the pool (unknown, reserved for joins), since a larger pool may have
// the room sooner; nor for more than one request's weight, since a lighter
// request may fit sooner; nor for a key with an even split (not pooled),
// whose room nodes may hold in their splits.
func until(h *Hash, p share.Params, g, w int64, x share.State, now int64, set share.Settings, pooled bool) (int64, bool) {
	t := p.When(g, w, x, now)
	if t < 0 {
		return now + set.Cooldown, false
	}
	return max(t, now), h.Unknown == 0 && h.Reserved == 0 && w == 1 && pooled
}

// alone reports whether no node but node holds a grant of h.
func alone(h *Hash, node string) bool {
	for id, rec := range h.Records {
		if id != node && (rec.Grant > 0 || rec.Hold > 0) {
			return false
		}
	}
	return h.Joins == 0 && h.Unknown == 0
}

// askedElsewhere reports whether the last op of a node but node, if after
// since (µs), asked for room on h: it was served, grew, or was told to wait
// or that there was no room. The key has demand elsewhere. (A node's later
// op, a give or a renewal, hides an earlier ask.)
func askedElsewhere(h *Hash, node string, since int64) bool {
	for id, rec := range h.Records {
		if id != node && rec.GrowthAt > since && (rec.Served > 0 || rec.Growth > 0 || rec.Outcome != share.Done) {
			return true
		}
	}
	return false
}

// maxFails bounds the doubling of the quiet time after failed calls.
const maxFails = 5

// over takes d, a share a node holds that the store did not count, out of
// what is held back for such nodes first (Unknown), then out of the pool.
func over(h *Hash, d int64) {
	take := min(d, h.Unknown)
	h.Unknown -= take
	h.Pool -= d - take
}

// owed holds back, for a lease, what the other nodes of a fleet of n may
// hold beyond their grants after deciding degraded, each in an even split:
// a node reported doing so, and the others' reports may come later.
func owed(h *Hash, node string, n, now int64, set share.Settings) {
	even := share.Even(int(n))
	want, seen := int64(0), int64(0)
	for _, id := range sortedNodes(h.Records) {
		if id == node {
			continue
		}
		seen++
		want += max(even-h.Records[id].Grant-h.Records[id].Hold, 0)
	}
	want += max(n-1-seen, 0) * even
	if add := min(max(want-h.Unknown, 0), max(h.Pool, 0)); add > 0 {
		h.Pool -= add
		h.Unknown += add
	}
	if h.Unknown > 0 {
		h.UnknownUntil = max(h.UnknownUntil, now+set.Lease+set.Recovery)
	}
}

// give returns share g in state x (as of now) to the pool.
func give(p share.Params, h *Hash, now, g int64, x share.State) {
	if g <= 0 {
		return
	}
	pool := p.Decay(h.PoolState, h.PoolAt, now)
	if h.Pool > 0 {
		h.PoolState = p.Merge(h.Pool, pool, g, x)
	} else {
		h.PoolState = x // a pool in debt (or empty) takes the state given
	}
	h.PoolAt = now
	h.Pool += g
}

// extend pushes the hash's expiry to at least now + two leases and a refill:
// long enough that every grant has lapsed and the pool has refilled before
// the contest can end. It returns the expiry.
func extend(p share.Params, h *Hash, now, lease int64) int64 {
	h.Expiry = max(h.Expiry, now+2*lease+p.Refill())
	return h.Expiry
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

// sortedNodes returns the record keys in order, so that the model's
// iteration is deterministic (as Redis's HGETALL order is for the script).
func sortedNodes(recs map[string]*Record) []string {
	ids := make([]string, 0, len(recs))
	for id := range recs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Beat applies node's heartbeat at now (µs), as fleet.lua does.
func (m *Model) Beat(now int64, node string, b share.Beat) share.BeatReply {
	_, known := m.members[node]
	// A node that leaves is an entry of its own: every node reads it.
	depart := func(id string) {
		m.stamp = max(now, m.stamp+1)
		m.entries[GoneMember+id] = &entry{epoch: now, expiry: now + max(b.GoneKeep, m.ActiveWindow), changed: m.stamp}
	}
	if b.Leave {
		if known {
			delete(m.members, node)
			depart(node)
		}
		return share.BeatReply{Now: now, Nodes: len(m.members), Next: b.From}
	}
	m.members[node] = now
	var gone []string
	for id, at := range m.members {
		if at <= now-m.ActiveWindow {
			gone = append(gone, id)
		}
	}
	// In the order registry.lua's ZRANGEBYSCORE reads them: by the last
	// beat, then by name.
	slices.SortFunc(gone, func(a, b string) int {
		return cmp.Or(cmp.Compare(m.members[a], m.members[b]), cmp.Compare(a, b))
	})
	for _, id := range gone {
		delete(m.members, id)
		depart(id)
	}
	mark := func(e *entry) {
		m.stamp = max(now, m.stamp+1)
		e.changed = m.stamp
	}
	for _, c := range b.Contests {
		mem := Member(c.Key, c.Limit)
		e := m.entries[mem]
		changed, quiet := true, c.Quiet
		switch {
		case e == nil:
			e = &entry{epoch: c.Epoch, callAt: c.CallAt, expiry: c.Expiry}
			m.entries[mem] = e
		case c.Epoch > e.epoch:
			// It replaces an earlier contest: that one's nodes must hear of it.
			e.epoch, e.callAt, e.expiry, quiet = c.Epoch, c.CallAt, c.Expiry, false
		case c.Epoch == e.epoch:
			quiet = quiet && c.CallAt <= e.callAt
			e.callAt, e.expiry = max(e.callAt, c.CallAt), max(e.expiry, c.Expiry)
		default:
			changed = false // an earlier contest's
			if e.changed == 0 {
				mark(e) // a quiet one came first: the earlier contest's node must read the later
			}
		}
		if c.Reset > e.reset {
			e.reset, e.expiry, changed, quiet = c.Reset, max(e.expiry, c.Expiry), true, false
		}
		if changed && !quiet {
			mark(e)
		}
	}
	for mem, e := range m.entries {
		if e.expiry <= now {
			delete(m.entries, mem)
		}
	}
	reply := share.BeatReply{Now: now, Nodes: len(m.members), New: !known, Next: b.From}
	var changed []string
	for mem, e := range m.entries {
		if e.changed > b.From {
			changed = append(changed, mem)
		}
	}
	slices.SortFunc(changed, func(a, b string) int { return int(m.entries[a].changed - m.entries[b].changed) })
	if b.Limit > 0 && len(changed) > b.Limit {
		changed, reply.More = changed[:b.Limit], true
	}
	for _, mem := range changed {
		e := m.entries[mem]
		if id, ok := strings.CutPrefix(mem, GoneMember); ok {
			reply.Gone = append(reply.Gone, share.Departure{Node: id, At: e.epoch})
			reply.Next = e.changed
			continue
		}
		key, lim, ok := ParseMember(mem)
		if !ok {
			continue
		}
		reply.Changes = append(reply.Changes, share.Contest{Key: key, Limit: lim, Epoch: e.epoch, CallAt: e.callAt, Expiry: e.expiry, Reset: e.reset})
		reply.Next = e.changed
	}
	return reply
}

// Members returns the nodes in the fleet as of now.
func (m *Model) Members(now int64) int {
	n := 0
	for _, at := range m.members {
		if at > now-m.ActiveWindow {
			n++
		}
	}
	return n
}

// GoneMember prefixes a departure's member in the registry, as the real
// store's does.
const GoneMember = "gone|"

// Member names (key, lim) in the registry. The real store's names differ;
// the model needs only to tell them apart.
func Member(key string, lim limit.Limit) string {
	return strconv.Itoa(int(lim.Algorithm)) + "|" + strconv.FormatInt(lim.Rate, 10) + "|" +
		strconv.FormatInt(int64(lim.Period), 10) + "|" + strconv.FormatInt(lim.Burst, 10) + "|" + key
}

// ParseMember reads a Member back.
func ParseMember(m string) (string, limit.Limit, bool) {
	var parts [5]string
	rest := m
	for i := 0; i < 4; i++ {
		j := indexByte(rest, '|')
		if j < 0 {
			return "", limit.Limit{}, false
		}
		parts[i], rest = rest[:j], rest[j+1:]
	}
	parts[4] = rest
	a, err1 := strconv.Atoi(parts[0])
	rate, err2 := strconv.ParseInt(parts[1], 10, 64)
	period, err3 := strconv.ParseInt(parts[2], 10, 64)
	burst, err4 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return "", limit.Limit{}, false
	}
	lim := limit.Limit{Rate: rate, Period: time.Duration(period), Burst: burst, Algorithm: limit.Algorithm(a)}
	return parts[4], lim, true
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// wholeRequests is the weight of as many whole requests of weight each as
// w holds (zero when each is zero: their weights differ).
func wholeRequests(w, each int64) int64 {
	if each <= 0 || w <= 0 {
		return 0
	}
	return w / each * each
}

// carriesSpend reports whether op carries what its node admitted alone, in
// an even split of a token bucket the fleet's growth made pooled (its
// shadow), and nothing else of it (no share held, nothing owed): a report
// of it, wanting nothing, makes the key's contest, its pool starting as
// spent; a join of a contest another node made first charges the pool with
// it. Either way a node that asks does not find the whole limit there.
func carriesSpend(p share.Params, op share.Op) bool {
	return op.Pooled && op.Epoch == 0 && p.Kind == share.Bucket && op.Shadow > 0 && !op.Leave && op.Held <= 0 && !op.Owed
}

// chargeSpend charges h's pool with what op's node admitted alone (its
// shadow, as of now).
func chargeSpend(p share.Params, h *Hash, now int64, op share.Op) {
	x := p.Decay(h.PoolState, h.PoolAt, now)
	sh := p.Decay(share.State{Level: op.Shadow}, op.At, now)
	h.PoolState, h.PoolAt = p.Charge(x, h.Pool, sh.Level), now
}
