package protocol

import (
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// A key's protocol state on one node (docs/protocol.md draws it).
//
// A key nobody contests has no state here: the node decides it in the
// fleet's even split (or, pooled, in nothing) and the store knows nothing
// of it. Everything else is one keyState, whose State (machine.go) says
// which share the node decides the key in, and moves only by Transition.
//
// Orthogonal to the state: at most one op in flight (a node sends one op per
// key at a time, and retries the same op, by its sequence number, until the
// store has answered it), the intents the next op carries, the requests
// waiting for room, and a refusal the store made until some instant.

// intent is what a key's next op must do; several may be pending at once
// and one op carries them all.
type intent uint8

const (
	wantJoin   intent = 1 << iota // answer a call: report the even split (or the grant of a lost contest)
	wantGive                      // give back what it can spare (a call)
	wantIdle                      // give back everything: the key is idle here
	wantRenew                     // renew the lease of a grant in use
	wantAsk                       // requests wait for room
	wantMore                      // its demand outruns its share: room before a request is short
	wantLeave                     // the node closes: everything back to the pool
	wantReport                    // it admitted in a share the store does not count (degraded, or alone in an even split the fleet's growth made pooled): report what it holds
)

// keyLim names a key's state: one per (key, limit).
type keyLim struct {
	key string
	lim limit.Limit
}

// keyState is one key's protocol state on this node.
type keyState struct {
	kl     keyLim
	params share.Params
	state  State // moved by Shares.to alone
	// Epoch is the contest the node holds the key in (store µs; zero in
	// Even), Grant its share there (positive in Held and Home, zero in the
	// others), LeaseEnd when the grant lapses (µs), Expiry the earliest the
	// contest may end (µs).
	epoch, grant, leaseEnd, expiry int64
	// callSeen is the latest call processed (µs), called the latest this
	// node made itself (a node does not answer its own call), in contest
	// callEpoch; recalled: it was published again, unanswered half an
	// interval on. heardLater is the latest call heard while an op of the
	// key was in flight, in contest heardEpoch: processed once the op is
	// answered (the store publishes the call it answers before the answer
	// arrives, and the node must know its own call first).
	callSeen, called, callEpoch int64
	heardLater, heardEpoch      int64
	recalled                    bool
	// joinEpoch is the contest a pending join answers (µs).
	joinEpoch int64
	// applied is the Seq of the last op whose answer was applied here.
	applied int64

	intents intent
	// op is the op in flight or to retry (nil: none); retry is set when
	// its last attempt failed.
	op    *share.Op
	retry bool

	waiters []*Waiter
	// waiting: in Shares.waiting. gone: forgotten (no longer in
	// Shares.keys), to be swept out of Shares.order and waiting.
	waiting, gone bool
	// retryAt is when to ask again after Wait or Call (µs).
	retryAt int64
	// deniedUntil is when the fleet may have room again (µs): until then
	// requests the node's share cannot admit are refused alone. refused
	// counts the requests refused so since the fleet last gave room: a key
	// refused over and over is over its limit, and asks less and less often.
	deniedUntil int64
	refused     int
	// refusedAt is when the node last refused a request of the key for
	// want of room (µs): while no request came since (lastUse), the node is
	// short of room itself, and its ops answer the calls it heard with
	// nothing to spare (share.Op.Heard).
	refusedAt int64
	// overAt is when the store last told this node the fleet had no room
	// for the key while other nodes held grants of it (a NoRoom not
	// Exact, µs): the key is over its limit. For a while after it, a
	// request short of the node's share is refused alone, while an op asks
	// for room for the next one (Shares.overLimit).
	overAt int64

	// rate is the node's demand on the key (weight per second, a moving
	// average), rateAt when it was last updated (µs); lastUse is when it
	// was last asked for (µs); maxWeight the heaviest request seen.
	rate            float64
	recent          float64 // the demand over the last fold alone: what spare() keeps for
	rateAt, lastUse int64
	hits            int64 // demand taken since rateAt, not yet folded into rate
	maxWeight       int64
	// registered is the expiry the registry holds for contest regEpoch,
	// as far as this node has sent or heard (µs). A contest of another
	// epoch is registered whatever the expiry: an entry of an earlier one
	// (a node that kept its grants through a Redis restart registers them
	// again) says nothing of this one.
	registered, regEpoch int64
	// yield: a call ended a pooled key's home; the answer gives it all
	// back. dropped: the node dropped its grants (it had been counted gone)
	// while this op was in flight: its answer's grant is not used.
	yield, dropped bool
	// homeAt is when the key became a home here (Home: the whole key, no
	// call since; its sparse requests are decided from memory while they
	// come less than half a home lease apart), servedAt when the pool
	// last served one of its requests (µs).
	homeAt, servedAt int64
	// faulted: the store refuses the key (a key of another type); retried
	// at faultRetry (µs).
	faulted    bool
	faultRetry int64
}

// move moves ks by ev: its state by Transition, and its grant and epoch
// with it: the grant granted in Held and Home, zero in the others; no
// epoch once released to the even split.
func (ks *keyState) move(ev Event, in Input) Effect {
	next, fx := Transition(ks.state, ev, in)
	ks.state = next
	switch {
	case ev == Granted:
		ks.grant = in.Grant
	case !next.holds():
		ks.grant = 0
	}
	if fx&Release != 0 {
		ks.epoch, ks.overAt = 0, 0 // the even split again: no contest to be over the limit in
	}
	return fx
}

// want is the weight of the requests waiting on the key.
func (ks *keyState) want() int64 {
	w := int64(0)
	for _, wt := range ks.waiters {
		w += wt.n
	}
	return w
}

// busy reports whether the key holds a grant other than a home, or has an
// op, an intent or a request waiting: the node beats every interval while
// one is (BeatDue). A home alone keeps no node busy: while its key is used
// the engine's decisions do (Engine.LastActive), and when it is not, a call
// for it comes on the channel, and again half an interval later, as for a key
// the node decides in its even split.
func (ks *keyState) busy() bool {
	return ks.state == Held || ks.op != nil || ks.intents != 0 || len(ks.waiters) > 0
}

// idle reports whether the key has nothing in flight, nothing pending and
// nothing waiting: a key in Even and idle has no reason to be here.
func (ks *keyState) idle() bool {
	return ks.op == nil && ks.intents == 0 && len(ks.waiters) == 0 && ks.deniedUntil == 0 && !ks.faulted
}

// shortOfRoom reports whether the node refuses requests of ks alone for
// want of room at us (µs): the store told it no room until later, or its
// latest request of the key was refused so (or ran out its wait). Its ops
// then answer the calls it heard with nothing to spare (share.Op.Heard).
func (ks *keyState) shortOfRoom(us int64) bool {
	return ks.deniedUntil > us || ks.refusedAt > 0 && ks.refusedAt >= ks.lastUse
}
