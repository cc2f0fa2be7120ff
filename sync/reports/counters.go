package reports

import (
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
)

// spendKey identifies the global state a spend belongs to.
type spendKey struct {
	key    string
	lim    limit.Limit
	window int64 // window algorithms only; zero for buckets
}

// counter is this node's running totals for one (key, limit, window): the
// unit of an idempotent report (Redis applies only what exceeds the totals it
// last acknowledged for the counter's epoch, so a report sent twice counts
// once), and what the reconciler knows of the key's lease and schedule.
type counter struct {
	spendKey
	epoch         int64 // grows per counter this node starts
	total         int64 // weight admitted since the epoch began
	refilled      int64 // of total, degraded spend that had refilled when taken: not charged
	acked         int64 // the total Redis has acknowledged
	ackedRefilled int64

	hits  int64     // demand since the last acknowledged report
	since time.Time // when hits began to accumulate: demand is hits over the time since
	last  time.Time // when the counter last spent, asked or was acknowledged

	due          bool  // spend past its threshold (the engine says) since the last report
	renew        bool  // the key's lease is due for renewal and the key in use
	pressure     bool  // a request was denied or escalated since the last report
	backoff      uint8 // pressure reports that changed nothing in a row
	nextPressure int   // the round before which pressure alone does not report
	orphan       bool  // spend of an evicted key or a window left behind: report soon
	faulted      bool  // Redis refused the key: decided under the fallback until retried
	retryAt      int   // for a faulted key, the round to try it again

	uncertain []remote.Uncertain // sync decisions that timed out and were counted in memory, oldest first
}

// counters holds a counter per key the node reported on recently, or has
// unreported spend on. It is bounded: beyond max counters, the spend of a
// new key is dropped and counted, never silently.
type counters struct {
	m     map[spendKey]*counter
	max   int
	epoch int64 // the last epoch handed out

	maxBytes  int64  // the bound on bytes (MaxPendingBytes)
	bytes     int64  // the bytes the counters take, as counterBytes estimates them
	bytesFull uint64 // new counters refused for want of bytes
	bytesLost int64  // weight of the spend refused for want of bytes
}

// counterOverhead is what a counter takes in memory beyond its key's bytes:
// the counter, its map entry (key and pointer, at a Go map's load) and the
// string header, rounded up (TestCounterBytesCoverTheHeap measures it).
const counterOverhead = 384

// uncertainBytes is what one timed-out decision a counter names takes.
const uncertainBytes = 16

// counterBytes estimates the memory of the counter of k.
func counterBytes(k spendKey) int64 {
	return counterOverhead + int64(len(k.key)+15)&^15
}

func newCounters(max int, maxBytes int64) *counters {
	return &counters{m: make(map[spendKey]*counter), max: max, maxBytes: maxBytes}
}

// remove forgets the counter of k.
func (cs *counters) remove(k spendKey) {
	if c, ok := cs.m[k]; ok {
		cs.bytes -= counterBytes(k) + int64(len(c.uncertain))*uncertainBytes
		delete(cs.m, k)
	}
}

// keyOf returns the counter key of spend s.
func keyOf(key string, lim limit.Limit, window int64) spendKey {
	k := spendKey{key: key, lim: lim}
	if !lim.Algorithm.IsBucket() {
		k.window = window
	}
	return k
}

// get returns the counter of k, making it if there is room; nil if not.
func (cs *counters) get(k spendKey, now time.Time) *counter {
	if c, ok := cs.m[k]; ok {
		return c
	}
	if len(cs.m) >= cs.max {
		return nil
	}
	b := counterBytes(k)
	if cs.maxBytes > 0 && cs.bytes+b > cs.maxBytes {
		cs.bytesFull++
		return nil
	}
	cs.bytes += b
	// Epochs grow across counters and across restarts of the node: Redis
	// ignores a report of an epoch older than the two it keeps.
	cs.epoch = max(cs.epoch+1, now.UnixMicro())
	c := &counter{spendKey: k, epoch: cs.epoch, since: now, last: now}
	cs.m[k] = c
	return c
}

// add counts spend s taken at now, and returns the weight it had to drop for
// want of room.
func (cs *counters) add(s local.Spend, now time.Time) (lost int64) {
	full := cs.bytesFull
	c := cs.get(keyOf(s.Key, s.Limit, s.Window), now)
	if c == nil {
		if cs.bytesFull != full {
			cs.bytesLost += s.Spent
		}
		return s.Spent
	}
	if c.hits == 0 && s.Since > 0 {
		c.since = time.Unix(0, s.Since) // demand accrued since the engine's first hit
	}
	c.total += s.Spent
	c.refilled += s.Spent - min(max(s.Charge, 0), s.Spent)
	c.hits += s.Hits
	c.pressure = c.pressure || s.Pressure
	c.due = c.due || s.Due
	c.orphan = c.orphan || s.Orphan
	c.last = now
	return 0
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

// shrink releases the map's memory once it holds far fewer counters than
// its peak (after an outage drained): Go maps never shrink on their own.
func (cs *counters) shrink(peak *int) {
	if n := len(cs.m); n > *peak {
		*peak = n
	} else if *peak > 4096 && n < *peak/4 {
		m := make(map[spendKey]*counter, n)
		for k, c := range cs.m {
			m[k] = c
		}
		cs.m, *peak = m, n
	}
}
