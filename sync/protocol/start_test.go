package protocol_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetcheck"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// A fleet of FleetSize 4 started together. Each node's first heartbeat
// reads the registry (empty) and it decides from the start (FleetSize: no
// settle). a, first to beat, saw one node up; its clients spend its even
// split at once and it asks. b, c and d read the registry before the
// contest was in it and decide in their even splits until they hear of it
// (their next heartbeats): the contest must hold their splits back until
// they join, whatever a saw. A change that held back only for the nodes
// the creator saw up (taken back) made a the key's home beside three
// splits counted twice: 3,360 admitted in 2 s where the bound is 2,181.
// (Found in review.)
func TestAFleetStartedTogetherUnderFleetSizeStaysWithinTheBound(t *testing.T) {
	key, lim := "k", limit.PerSecond(1000).WithBurst(100)
	cfg := protocol.Config{Interval: testInterval, AskWait: 50 * time.Millisecond, ActiveWindow: time.Second, FleetSize: 4}
	f := newRvFleet(t, cfg, "a", "b", "c", "d") // each beats once, in turn, at the same instant
	start := f.now
	type pending struct {
		n *rvNode
		w *protocol.Waiter
	}
	var waiting []pending
	admitted := 0
	try := func(n *rvNode) {
		res, err := n.eng.AllowN(f.now, key, lim, 1)
		if err == nil {
			if res.Allowed {
				admitted++
			}
			return
		}
		if !errors.Is(err, local.ErrShort) {
			return
		}
		w, refuse, _ := n.s.Short(f.now, f.now, key, lim, 1, f.now+int64(cfg.AskWait), nil)
		if !refuse && w != nil {
			waiting = append(waiting, pending{n, w})
		}
	}
	settle := func() {
		rest := waiting[:0]
		for _, p := range waiting {
			select {
			case <-p.w.Done():
				v, _ := p.w.Verdict()
				switch v {
				case protocol.Admitted:
					admitted++
				case protocol.Retry:
					if res, err := p.n.eng.AllowN(f.now, key, lim, 1); err == nil && res.Allowed {
						admitted++
					}
				}
			default:
				rest = append(rest, p)
			}
		}
		waiting = rest
	}
	const w = 2 * time.Second
	for ms := 0; ms <= int(w/time.Millisecond); ms++ {
		for i, n := range f.nodes {
			n.s.Tick(f.now)
			if ms > 0 && (ms+5*i)%20 == 0 { // each node beats every interval, staggered
				f.beat(n)
			}
			// a: 30 at the start, then 3,000/s; b, c, d: 20 (within
			// their even splits, 25) at the start, then 200/s each.
			offered := 3
			switch {
			case i == 0 && ms == 0:
				offered = 30
			case i > 0 && ms == 0:
				offered = 20
			case i > 0 && ms%5 == 0:
				offered = 1
			case i > 0:
				offered = 0
			}
			for range offered {
				try(n)
			}
			f.send(n)
			settle()
		}
		if ms == 0 || ms == 50 {
			f.logHash(key, lim, "at "+time.Duration(ms*int(time.Millisecond)).String())
		}
		f.now += int64(time.Millisecond)
	}
	f.logHash(key, lim, "at the end")
	span := time.Duration(f.now - start - int64(time.Millisecond))
	bound := fleetcheck.Bound(fleetcheck.BoundParams{Mode: hybrid.Async, Algorithm: limit.TokenBucket, Rate: 1000, Period: time.Second,
		Burst: 100, Interval: testInterval, Nodes: 4, MaxWeight: 1, RTT: time.Millisecond}, span)
	t.Logf("admitted %d within %v; the bound %.1f (an exact limiter: %d)", admitted, span, bound, 100+int(span/time.Millisecond))
	if float64(admitted) > bound {
		t.Errorf("the fleet admitted %d within %v: over the bound %.1f", admitted, span, bound)
	}
}

// logHash logs the store's contest of (key, lim): each record's grant and
// hold, the pool and what is held back; it returns the records' sum.
func (f *rvFleet) logHash(key string, lim limit.Limit, what string) int64 {
	h := f.store.Hash(f.us(), key, lim)
	if h == nil {
		f.t.Logf("%s: no contest", what)
		return 0
	}
	sum := int64(0)
	for id, r := range h.Records {
		f.t.Logf("  %s: record %s grant %d hold %d", what, id, r.Grant, r.Hold)
		sum += r.Grant + r.Hold
	}
	f.t.Logf("%s: pool %d joins %d reserved %d unknown %d; grants %d", what, h.Pool, h.Joins, h.Reserved, h.Unknown, sum)
	return sum
}
