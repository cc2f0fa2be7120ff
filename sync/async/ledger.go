package async

import (
	"sync"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
)

// ledger is what this node admitted on each key, in running totals Redis
// applies idempotently (remote.Store.AddToLedgers): a total sent twice, its
// answer lost the first time, counts once. A total Redis acknowledged is
// kept, and sent again whole when the node flushes: a Redis that lost what
// it acknowledged (a failover to a replica the write had not reached)
// takes it again, and one that has it takes nothing. It is bounded: beyond
// max keys, acknowledged totals are forgotten first; only when every total
// is still owed is the weight of a new key dropped, counted and logged,
// never silently.
type ledger struct {
	mu      sync.Mutex
	m       map[keyLim]*tally
	max     int
	epoch   int64  // the last epoch handed out
	dropped uint64 // the engine's dropped spend last seen
	flushes int64  // flushes begun: a tally resent in this one has sent == flushes
	// settled lists keys whose totals Redis acknowledged whole, oldest
	// first, for a full ledger to forget (each checked again when popped:
	// one may have been added to since).
	settled []keyLim
	// now is the clock the ledger reads (the reconciler's).
	now func() time.Time
}

// tally is one key's running total.
type tally struct {
	epoch, total, acked int64
	sent                int64 // the flush it was last sent whole in
	last                time.Time
	retryAt             time.Time // a key Redis refused: not sent again before

	inflight bool
}

// keyLim names a key's tally: one per (key, limit).
type keyLim struct {
	key string
	lim limit.Limit
}

func newLedger(max int) *ledger {
	return &ledger{m: make(map[keyLim]*tally), max: max, now: time.Now}
}

// get returns kl's tally, making it if there is room. l.mu is held.
func (l *ledger) get(kl keyLim, now time.Time) *tally {
	if t, ok := l.m[kl]; ok {
		return t
	}
	for len(l.m) >= l.max && len(l.settled) > 0 {
		old := l.settled[0]
		l.settled = l.settled[1:]
		if t := l.m[old]; t != nil && t.acked >= t.total && !t.inflight {
			delete(l.m, old) // Redis has it whole: its epoch ends here
		}
	}
	if len(l.m) >= l.max {
		return nil
	}
	// Epochs grow across keys and across restarts of the node: Redis keeps
	// a node's two latest per key.
	l.epoch = max(l.epoch+1, now.UnixMicro())
	t := &tally{epoch: l.epoch, last: now}
	l.m[kl] = t
	return t
}

// add counts weight n admitted on (key, lim) and returns what it dropped.
func (l *ledger) add(key string, lim limit.Limit, n int64, now time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.get(keyLim{key, lim}, now)
	if t == nil {
		return n
	}
	t.total += n
	t.last = now
	return 0
}

// take counts the spend the engine gave up, and returns the weight dropped.
func (l *ledger) take(spend []local.Spend, now time.Time) (lost int64) {
	for _, s := range spend {
		if s.Spent > 0 {
			lost += l.add(s.Key, s.Limit, s.Spent, now)
		}
	}
	return lost
}

// holdOff keeps e's tally from being sent again before at: Redis refused
// its key (another type at its name).
func (l *ledger) holdOff(e remote.LedgerEntry, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.m[keyLim{e.Key, e.Limit}]; t != nil && t.epoch == e.Epoch {
		t.retryAt = at
	}
}

// beginFlush starts a flush: every total is to be sent whole once more.
func (l *ledger) beginFlush() {
	l.mu.Lock()
	l.flushes++
	l.mu.Unlock()
}

// entries returns up to most tallies (zero: all), marked in flight: those
// Redis has not acknowledged, and with flushing those not yet sent whole in
// this flush. Each is sent with its whole total: Redis adds only what it
// has not applied of the epoch.
func (l *ledger) entries(most int, flushing bool) []remote.LedgerEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []remote.LedgerEntry
	for kl, t := range l.m {
		owed := t.total > t.acked || flushing && t.sent != l.flushes && t.total > 0
		if !owed || t.inflight || l.now().Before(t.retryAt) {
			continue
		}
		if most > 0 && len(out) >= most {
			break
		}
		t.inflight = true
		out = append(out, remote.LedgerEntry{Key: kl.key, Limit: kl.lim, Epoch: t.epoch, Total: t.total})
	}
	return out
}

// acked records what Redis applied of entries (errs: each one's fault), and
// returns the first fault.
func (l *ledger) acked(entries []remote.LedgerEntry, errs []error) (fault error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, e := range entries {
		if errs[i] != nil && fault == nil {
			fault = errs[i]
		}
		t := l.m[keyLim{e.Key, e.Limit}]
		if t == nil || t.epoch != e.Epoch {
			continue
		}
		t.inflight = false
		if errs[i] == nil {
			t.acked = max(t.acked, e.Total)
			t.sent = l.flushes
			if t.acked >= t.total {
				l.settled = append(l.settled, keyLim{e.Key, e.Limit})
			}
		}
	}
	if len(l.settled) > 2*l.max {
		// Keys settled again and again are listed as often: keep each once,
		// if it is still settled.
		kept := make([]keyLim, 0, len(l.m))
		seen := make(map[keyLim]bool, len(l.m))
		for _, kl := range l.settled {
			if t := l.m[kl]; t != nil && t.acked >= t.total && !seen[kl] {
				seen[kl] = true
				kept = append(kept, kl)
			}
		}
		l.settled = kept
	}
	return fault
}

// unsent marks entries sent in a call that failed: sent again later.
func (l *ledger) unsent(entries []remote.LedgerEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range entries {
		if t := l.m[keyLim{e.Key, e.Limit}]; t != nil && t.epoch == e.Epoch {
			t.inflight = false
		}
	}
}

// unacked returns the keys and weight Redis has not acknowledged.
func (l *ledger) unacked() (keys int, weight int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.m {
		if t.total > t.acked {
			keys++
			weight += t.total - t.acked
		}
	}
	return keys, weight
}
