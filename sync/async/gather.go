package async

import "time"

// gather decides how long the sender waits, once woken for ops, before it
// calls Redis, so that the ops made meanwhile travel in the same call.
//
// A call costs Redis about what a PING does before its ops do anything
// (BenchmarkShareOps), so Async's Redis CPU follows its calls. On a busy
// node ops come about one a millisecond or faster (W1), and sent as each
// came, a call carried little more than one; gathering a tenth of the
// interval (2 ms by default) cut W1's calls and its Redis CPU a decision
// with its p99 latency within the runs' spread (docs/benchmarks.md, "Ops
// gathered into fewer calls"). Only ops no request waits on are gathered
// (renewals, growth before a request is short, idle keys given back): an
// ask or a call's answer (protocol.Shares.Urgent) waiting when the sender
// wakes goes at once and takes what was gathered with it. One made while
// the sender gathers waits for the window's end (at most a tenth of the
// interval): woken for it, the sender went at once so often in W1 (asks
// come about every millisecond) that it gathered next to nothing, W1's
// calls a decision back from 0.18 to 0.29 and its Redis CPU above Sync's,
// its p99 no better (two interleaved pairs, docs/benchmarks.md). A node
// whose last call began long ago calls at once too: a quiet node has
// nothing to gather.
type gather struct {
	wait time.Duration // how long a busy node gathers: a tenth of the interval, at most maxGather
}

// maxGather bounds the gather window: the ops that wait for it are still
// due soon (a lease to renew, growth before a request is short).
const maxGather = 2 * time.Millisecond

// busyWithin is how many gather windows after a call began the node is
// still busy: a call within ten windows (20 ms by default) says more ops
// are on their way.
const busyWithin = 10

func newGather(interval time.Duration) gather { return gather{wait: min(interval/10, maxGather)} }

// before returns how long to wait before a call at now, the last call
// having begun at last (zero: none yet).
func (g gather) before(now, last time.Time) time.Duration {
	if g.wait <= 0 || last.IsZero() || now.Sub(last) > busyWithin*g.wait {
		return 0
	}
	return g.wait
}
