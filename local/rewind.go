package local

import "github.com/hybridlimit/hybridlimit/limit"

// Rewind tells the engine that time is now (Unix ns) although it has seen
// later times: the clock it is fed stepped back, because the step forward it
// had taken was found to be wrong (a node clock that jumped, recognised by
// clock.Offset), or because the timeline it follows (Redis TIME) stepped
// back. Without it every shard would hold its clock at the latest time seen,
// and a key seeded from the true timeline would look refilled until the
// wrong time came round again.
//
// Each shard whose clock is ahead of now comes back to now, and so does the
// state that ran ahead with it: a window later than now's window becomes
// now's window, counts kept; a log's times later than now become now. A
// bucket's theoretical arrival time is left as it is: ahead of now it reads
// as spent, which is the safe side, until the reconciler seeds the key from
// Redis again (in the same round, for a key spent on since the last one).
// Nothing is refilled by a rewind; what was admitted while the clock ran
// ahead stays admitted.
//
// Rewind locks one shard at a time and returns how many shards it rewound.
// It costs a walk over every key of those shards: call it on a step, not per
// decision.
func (e *Engine) Rewind(now int64) int {
	rewound := 0
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		if sh.now > now {
			sh.rewind(now)
			rewound++
		}
		sh.mu.Unlock()
	}
	return rewound
}

// rewind brings the shard's clock, and its keys' state that ran ahead of
// now, back to now. It runs under sh.mu.
func (sh *shard) rewind(now int64) {
	sh.now = now
	for _, en := range sh.keys.m {
		sh.rewindEntry(en, now)
	}
	for _, xs := range sh.extras {
		for _, en := range xs {
			sh.rewindEntry(en, now)
		}
	}
	for j := range sh.orphans {
		o := &sh.orphans[j]
		if !o.Limit.Algorithm.IsBucket() {
			if p, ok := sh.policies[o.Limit]; ok {
				o.Window = min(o.Window, p.index(now))
			}
		}
	}
}

// rewindEntry brings one state that ran ahead of now back to now.
func (sh *shard) rewindEntry(en *entry, now int64) {
	p := en.pol
	switch p.lim.Algorithm {
	case limit.FixedWindow, limit.SlidingWindowCounter:
		if w := p.index(now); en.st[0] > w {
			en.st[0] = w
		}
	case limit.SlidingWindowLog:
		en.st[0] = min(en.st[0], now)
		if en.st[1] != 0 {
			for j := range sh.logs[en.st[1]-1].events {
				ev := &sh.logs[en.st[1]-1].events[j]
				ev.at = min(ev.at, now)
			}
		}
	}
}
