package protocol

// The state machine of one key on one node: the states docs/protocol.md
// names, the events that move a key between them, and one pure function,
// Transition, from a state and an event to the next state and the effects
// the node must carry out. Shares keeps each key's State and moves it only
// through Transition (Shares.to); everything else a key carries (its op in
// flight, the intents of its next op, the requests waiting, a refusal in
// force) is orthogonal to the state and listed on keyState.
//
// Time enters through the events: the sweep turns the clock into Lapsed and
// ExpiryPassed (a lease's end, a contest's expiry), the answers of the store and
// the registry into the others. Transition itself reads no clock.

// State is where a key stands on this node: which share it decides in.
type State uint8

const (
	// Even: no contest on the key here. The node decides it in the fleet's
	// even split (a pooled key, whose one request weighs more than the
	// split: in nothing) and the store knows nothing of it. A key in Even
	// has a state here only while a request waits on it (its ask makes the
	// contest) or a call must still be answered.
	Even State = iota
	// Empty: in a contest, holding no grant: every request is short and
	// asks the store.
	Empty
	// Held: in a contest, holding a grant under a lease.
	Held
	// Home: holding the whole key, with no call for it since the store
	// granted it: every request is decided here, refusals included, under
	// a home lease.
	Home
	numStates
)

func (s State) String() string {
	if s >= numStates {
		return "state(?)"
	}
	return [...]string{"even", "empty", "held", "home"}[s]
}

// Event is what happens to a key.
type Event uint8

const (
	// Announced: the registry tells of a contest the node holds nothing
	// of and will not report: read on its first reading of the registry
	// (it has decided nothing yet), or on a pooled key it asks nothing of.
	Announced Event = iota
	// Contest: a contest the node has not joined (its start, or a new one
	// while it held an earlier one): it joins, reporting what it holds.
	Contest
	// Granted: the store answered an op; the node holds the grant the
	// answer names (Input.Grant; Input.Whole: the whole key, and no call
	// came while the op was on its way).
	Granted
	// Ended: the store answered that the contest is gone.
	Ended
	// Left: the store answered the node's leave (it closes).
	Left
	// Called: another node called for room on the key's contest.
	Called
	// Lapsed: the node stops using its grant: the lease's end (less two
	// intervals) passed, an answer came too late to use, or the node
	// dropped every grant (counted gone, or a grant answered after that).
	Lapsed
	// ExpiryPassed: the contest's expiry passed while the node held
	// nothing and no request waited.
	ExpiryPassed
	numEvents
)

func (e Event) String() string {
	if e >= numEvents {
		return "event(?)"
	}
	return [...]string{"announced", "contest", "granted", "ended", "left", "called", "lapsed", "expiry passed"}[e]
}

// Input qualifies a Granted event.
type Input struct {
	// Grant is what the store granted the node (share.One: the whole key).
	Grant int64
	// Whole: the grant is the whole key, and no call came while the op
	// was on its way (a call's give answers it: no home).
	Whole bool
}

// Effect is what a transition asks of the node; several may come at once.
type Effect uint8

const (
	// HoldNothing: the engine decides the key in no grant from now on.
	HoldNothing Effect = 1 << iota
	// Release: the key is the even split's again: no claim, and the engine
	// decides it in the fleet's split.
	Release
	// CountExpired: a grant the node stops using (Stats.Expired).
	CountExpired
	// Join: an op joins the contest, reporting what the node holds.
	Join
	// GiveBack: an op gives back what the node can spare, unless requests
	// wait on the key (they keep everything).
	GiveBack
	// HomeLost: a home ended by a call: the node tallies how its homes end
	// (moved, Shares.homeEnded), and a pooled key's gives everything back.
	HomeLost
)

// Transition is the key's next state after ev in state st, and what the
// node must do. It is total: an event a state does not expect leaves the
// state as it is, with no effect.
func Transition(st State, ev Event, in Input) (State, Effect) {
	switch ev {
	case Announced:
		if st == Even {
			return Empty, HoldNothing
		}
	case Contest:
		return st, Join
	case Granted:
		switch {
		case in.Grant <= 0:
			return Empty, 0
		case in.Whole:
			return Home, 0
		}
		return Held, 0
	case Ended:
		return Even, Release
	case Left:
		return Empty, 0
	case Called:
		switch st {
		case Held:
			return Held, GiveBack
		case Home:
			return Held, GiveBack | HomeLost
		}
	case Lapsed:
		if st == Held || st == Home {
			return Empty, CountExpired | HoldNothing
		}
	case ExpiryPassed:
		if st == Empty {
			return Even, Release
		}
	}
	return st, 0
}

// holds reports whether a key in st holds a grant: the node's grant is
// positive in these states and zero in the others.
func (s State) holds() bool { return s == Held || s == Home }

// contested reports whether a key in st is in a contest.
func (s State) contested() bool { return s != Even }
