package reconcile

import (
	"slices"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
)

// spendKey identifies the global state a spend belongs to.
type spendKey struct {
	key    string
	lim    limit.Limit
	window int64 // window algorithms only; zero for buckets
}

// counter is this node's running total of what it spent on one key, the
// unit of an idempotent report: Redis applies only what exceeds the total it
// last acknowledged for the counter's epoch, so a report sent twice (a round
// the client stopped waiting for that did reach Redis) counts once.
type counter struct {
	spendKey
	epoch int64     // grows per counter this node starts
	total int64     // spent since the epoch began
	acked int64     // the total Redis has acknowledged
	hits  int64     // demand since the last acknowledged report
	since time.Time // when the last acknowledged report was taken: demand is hits over the time since
	last  time.Time // when the counter last spent or was acknowledged
}

// counters holds a counter per key the node has spent on recently. It is
// bounded: beyond max counters, the spend of a new key is dropped and
// counted, never silently.
type counters struct {
	m     map[spendKey]*counter
	max   int
	epoch int64 // the last epoch handed out
}

func newCounters(max int) *counters {
	return &counters{m: make(map[spendKey]*counter), max: max}
}

// add counts spend s taken at now, and returns the weight it had to drop for
// want of room.
func (cs *counters) add(s local.Spend, now time.Time) (lost int64) {
	k := spendKey{key: s.Key, lim: s.Limit}
	if !s.Limit.Algorithm.IsBucket() {
		k.window = s.Window
	}
	c, ok := cs.m[k]
	if !ok {
		if len(cs.m) >= cs.max {
			return s.Spent
		}
		// Epochs grow across counters and across restarts of the node:
		// Redis ignores a report of an epoch older than the two it keeps.
		cs.epoch = max(cs.epoch+1, now.UnixMicro())
		c = &counter{spendKey: k, epoch: cs.epoch, since: now}
		cs.m[k] = c
	}
	c.total += s.Spent
	c.hits += s.Hits
	c.last = now
	return 0
}

// due returns the counters with something Redis has not acknowledged, in
// the order of their epochs (a key's older counter must be applied first).
func (cs *counters) due(dst []*counter) []*counter {
	for _, c := range cs.m {
		if c.total > c.acked || c.hits > 0 {
			dst = append(dst, c)
		}
	}
	slices.SortFunc(dst, func(a, b *counter) int { return int(a.epoch - b.epoch) })
	return dst
}

// ack records that Redis applied c's total as sent at sent.
func (cs *counters) ack(c *counter, total, hits int64, sent time.Time) {
	c.acked = max(c.acked, total)
	c.hits -= hits
	c.since, c.last = sent, sent
}

// drop forgets c, returning the weight Redis never acknowledged.
func (cs *counters) drop(c *counter) (lost int64) {
	delete(cs.m, c.spendKey)
	return c.total - c.acked
}

// forget drops counters that no longer matter: a key fully acknowledged and
// idle for idle, or a window older than the previous one at serverNow (Unix
// ns on Redis's clock), which no algorithm weighs any more. idle must be
// much shorter than the 60 active windows Redis keeps a silent node's totals
// for, so Redis still holds them for any counter the node still has.
func (cs *counters) forget(now time.Time, idle time.Duration, serverNow int64) {
	for k, c := range cs.m {
		stale := c.total == c.acked && c.hits == 0 && now.Sub(c.last) > idle
		if !k.lim.Algorithm.IsBucket() && k.window < serverNow/int64(k.lim.Period)-1 {
			stale = true
		}
		if stale {
			delete(cs.m, k)
		}
	}
}

// unacked counts the counters holding spend Redis has not acknowledged.
func (cs *counters) unacked() int {
	n := 0
	for _, c := range cs.m {
		if c.total > c.acked {
			n++
		}
	}
	return n
}
