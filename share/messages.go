package share

import (
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Op is one node's operation on one (key, limit)'s contest in the store:
// it tells what the node holds and what it keeps, and asks, if it needs,
// for room. Every op is all of these at once, so a node sends one op per key
// at a time and the store applies each atomically.
type Op struct {
	Key   string
	Limit limit.Limit
	// Epoch names the contest the node holds the key in: the store's µs
	// when it began. Zero: none; the node decides the key in its even split
	// (or, a pooled key, in nothing).
	Epoch int64
	// Held is the share the node decides the key in now, and Keep what it
	// keeps of it after this op (Keep <= Held): Held − Keep returns to the
	// pool with State, as spent as the node's own.
	Held, Keep int64
	// State is the node's state of the key, as of At (the store's µs).
	State State
	At    int64
	// Want is the weight of the requests waiting for room on this node (0:
	// none): the store grows the node from the pool as far as they need, if
	// it can, and otherwise says what to do (Reply.Outcome). AskedAt is when
	// the latest of them was made (the store's µs, as the node reads it):
	// what the pool admits itself (Serve) counts from then, when all were.
	Want, AskedAt int64
	// Need is the share the node would like to hold for its demand; the
	// store grows it toward Need from what the pool holds.
	Need int64
	// Serve: the node's demand does not call for a share of its own (it
	// could not hold one request at its rate): the store admits Want from
	// the pool itself, if the pool has the room, rather than growing the
	// node.
	Serve bool
	// Each is, for a Serve op, the weight of each of the requests its Want
	// adds up (zero: they weigh differently): the pool with room for some
	// of them but not all serves as many whole requests as it holds, the
	// oldest first, rather than none.
	Each int64
	// Fleet is the number of nodes the node divides uncontested keys among,
	// and Pooled marks a key with no even split (one request weighs more
	// than the split): a contest an op creates expects Fleet − 1 other
	// nodes to join, with every share the creator does not hold in the
	// pool when Pooled, and One − Fleet even splits in it otherwise.
	Fleet  int
	Pooled bool
	// Full is when the node's state of a token bucket became full (µs; 0:
	// it never held any), -1 when it is not full. Shadow is, for a token
	// bucket, the level one exact bucket holding the whole limit would have
	// now (ns, as of At) had this node alone admitted since ShadowSince
	// (µs), when its share was last full; -1 for none. A contest whose
	// creator's shadow covers a time every other node spent full knows the
	// exact state: the creator's shadow.
	Full, Shadow, ShadowSince int64
	// Join marks the answer to a call, which counts toward the joins the
	// contest waits for. An op of a node that was not in the contest (Epoch
	// zero, or an earlier one) counts as a join whether marked or not.
	Join bool
	// Leave: the node stops (it closes). All it holds returns to the pool;
	// Keep and Want must be zero.
	Leave bool
	// Owed: the node admitted while degraded in Held, a share the store did
	// not count. Every other node of the fleet may have too, each in an
	// even split: the store holds that back (Unknown) for a lease, until
	// their own reports say.
	Owed bool
	// Seq numbers the op among this node's: a node that got no answer sends
	// the same op again, and the store, having applied it already, answers
	// it again as it did instead of applying it twice.
	Seq int64
	// Applied is the Seq of the last op on the key whose answer the node
	// applied (0: none in this contest). A store whose record of the node
	// is older lost writes it had answered (a failover to a replica they
	// had not reached): it takes the pool as wholly spent, as it does a
	// contest it lost, rather than hand out room that was spent.
	Applied int64
	// Heard is, when the node refuses requests of the key alone for want
	// of room (told NoRoom until later, or its latest request of the key
	// refused so), the latest call on the key it had heard when it made the
	// op (the store's µs of the call, Contest.CallAt); zero otherwise. Such
	// an op answers every call up to Heard with nothing to spare: the
	// node's own demand is beyond its share. Once every node holding a
	// grant has answered so (or asked for room itself after the call and
	// not been given it), the store tells an asker no room at once rather
	// than keep it waiting out the call's window for room that will not
	// come. A node with room to spare names no call: what it keeps for its
	// demand may go unused, and the asker waits as before.
	Heard int64
	// ResetHeard says which resets of the key the node's State (and
	// Shadow) are from after: it has heard of, and started afresh from,
	// every reset made at or before ResetHeard (the store's µs). A node
	// hears of a reset through the registry, a beat or so after it was
	// made: an op sent meanwhile carries the state from before it, spent.
	// The store takes the state of a node that has not heard of the
	// contest's last reset as fresh, as the reset made the pool (given back
	// as it was, it spent the fresh pool again: the key stayed exhausted
	// for its period).
	ResetHeard int64
}

// Outcome is what the store did with an op's Want.
type Outcome uint8

// The outcomes.
const (
	// Done: the op was applied, and Want, if any, has room now in the
	// node's share (after its Growth).
	Done Outcome = iota
	// Wait: Want has no room yet, but will: the contest is still waiting
	// for nodes to join, or nodes are giving back after a call. The node
	// asks again shortly.
	Wait
	// Call: Want has no room in the pool, and other nodes hold shares they
	// may not need: the node broadcasts a call (Beat.Contests) so that they
	// give back what they can spare, then asks again.
	Call
	// NoRoom: the fleet has no room for Want until Until: the node refuses
	// such requests alone until then.
	NoRoom
	// Ended: the contest the op named has ended (or never was), and the op
	// changed nothing: the node holds the key as uncontested again.
	Ended
)

var outcomeNames = [...]string{"done", "wait", "call", "no-room", "ended"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(?)"
}

// Reply is the store's answer to an op.
type Reply struct {
	Outcome Outcome
	// Epoch is the contest the node now holds the key in.
	Epoch int64
	// Grant is the node's share now: what it kept, plus Growth, which it
	// joins to its state weighted by Pool's state.
	Grant, Growth int64
	// Pool is the pool's state as of Now, which Growth carries.
	Pool State
	// LeaseEnd is when the grant lapses unless renewed (µs): the store then
	// takes it as wholly spent.
	LeaseEnd int64
	// Expiry is the earliest the contest may end (µs): the registry entry
	// that tells the fleet the key is contested must live until then.
	Expiry int64
	// Until is, for NoRoom, when the fleet may have room (µs).
	Until int64
	// Exact, for NoRoom: nobody else holds any of the key, so nothing
	// brings room before Until but the pool's refill (or, for a node that
	// holds it all, its own): the node refuses alone until then, without
	// asking again. Otherwise a holder may give room back sooner.
	Exact bool
	// Served is the weight the store admitted itself, from the pool (an
	// op with Serve): the node admits that much of its waiting requests,
	// oldest first, without spending its own share. ServedAt is when the
	// pool counts them (µs): when they were asked for, or the first
	// instant after that the pool had the room.
	Served, ServedAt int64
	// Now is the store's clock at the op (µs).
	Now int64
	// Lost: the store had lost the contest the node held (the key evicted
	// or deleted, or the store restarted empty) and rebuilt it from the
	// node's report.
	Lost bool
	// Over: the node held more than the store's record of it (it decided
	// degraded): the store believed it, taking the excess from the pool.
	Over bool
	// Replace: the node's state is replaced, not joined: it gave its share
	// back, and its Growth carries the whole fleet's exact state (its
	// shadow, every other node having spent nothing since).
	Replace bool
	// Reset is the contest's last reset (µs; 0: none): a node that has not
	// heard of it yet starts its state of the key afresh before it applies
	// the reply, as it would on hearing of it through the registry, a beat
	// or so later. (Until then, what it admitted out of room the fresh pool
	// gave it was forgotten when it heard.)
	Reset int64
	// Err is this op's own fault (a key of another type), if any.
	Err error
}

// Settings are the parameters every op of a node carries: how long things
// last in the store, in µs.
type Settings struct {
	// Lease is how long a grant holds without being renewed.
	Lease int64
	// CallWindow is how long after a call the store expects the nodes to
	// give back: an ask that finds no room meanwhile waits (Wait).
	CallWindow int64
	// Cooldown is the least time between two calls on one key: an ask that
	// finds no room after a call's window is refused (NoRoom) until then.
	Cooldown int64
	// Recovery is how long a node may go on deciding degraded, in an even
	// split of its own, after the store can be reached again (its circuit
	// breaker's open time and a call's timeout): a grant that lapsed
	// unreported, or a contest the store lost, is held back that much
	// longer than a lease before the pool lends it again.
	Recovery int64
	// HomeLease is how long a grant of the whole key (a home: nobody else
	// holds or asks for any of it) holds without being renewed; zero means
	// Lease. It may be long: a home outlives its node only while nobody
	// knows the node has gone (Gone).
	HomeLease int64
	// Gone are the nodes this node knows left the fleet (their last
	// heartbeat older than the active window), each with when the registry
	// found it: a node that beats no more uses no grant (it stops an active
	// window after its last heartbeat), so what it held and has not
	// reported since lapses then, whatever its lease.
	Gone []Departure
}

// Departure is a node that left the fleet at At (µs, the store's clock):
// its last heartbeat was an active window old, or it left as it closed.
type Departure struct {
	Node string
	At   int64
}

// Contest is a contested key's entry in the registry every node reads at its
// heartbeat. A call on the key (CallAt) asks every node holding a share of
// it to give back what it can spare (an even split included: the contest's
// start). Expiry is when the contest may end: until then every node holds
// the key as contested. Reset, when not zero, is when the key was reset
// (µs): every node starts the state it holds of the key afresh; an entry
// may carry a reset alone (Epoch zero), for a key nobody contests.
//
// Quiet marks a registration (no call, no reset) that no other node needs
// to read: a contest of a key pooled in every fleet of two nodes or more,
// which no node decides in an even split of. The registry records it
// without making it a change the nodes read, unless it replaces an earlier
// contest of the key (a node may still hold a grant of that one), or an
// earlier contest's registration comes after it (its node must learn of
// this one).
//
// Published marks a call the store published itself when it answered the
// op that made it (shares.lua): the registry records it without
// publishing it again, and the node sends it with its next heartbeat
// rather than beating at once.
type Contest struct {
	Key       string
	Limit     limit.Limit
	Epoch     int64 // µs
	CallAt    int64 // µs
	Expiry    int64 // µs
	Reset     int64 // µs
	Quiet     bool
	Published bool
}

// Beat is a node's heartbeat: it keeps the node in the fleet, sends the
// calls it makes, and reads the registry's changes since From.
type Beat struct {
	// From is the stamp after which to return the registry's changes: the
	// Next of the previous reply; zero returns every entry.
	From int64
	// Limit is the most changes to return.
	Limit int
	// Contests are this node's calls, and renewals of contests' expiry.
	Contests []Contest
	// Leave takes the node out of the fleet (it is closing).
	Leave bool
	// GoneKeep is how long the registry keeps a node's departure (µs): at
	// least the longest lease, after which whatever it held has lapsed.
	GoneKeep int64
}

// BeatReply is the fleet's answer to a heartbeat.
type BeatReply struct {
	// Now is the store's clock (µs), Nodes the nodes in the fleet.
	Now   int64
	Nodes int
	// New: the node was not in the fleet before this beat (its first, a
	// store that restarted empty, or a node gone longer than the active
	// window).
	New bool
	// Changes are the registry entries changed after From, oldest first;
	// Next is the From of the next beat, and More says there are more.
	Changes []Contest
	Next    int64
	More    bool
	// Gone are the departures among the changes, in order.
	Gone []Departure
}

// Micros returns ns as µs, rounded down: a time for the store.
func Micros(ns int64) int64 { return ns / 1000 }

// Nanos returns µs as ns.
func Nanos(us int64) int64 { return us * 1000 }

// Duration returns d in µs, at least 1.
func Duration(d time.Duration) int64 { return max(d.Microseconds(), 1) }
