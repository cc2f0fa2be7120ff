package rules

import (
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Penalty backs off repeat offenders exponentially. A caller asks Blocked
// before planning a request and, when a check limits the client, records a
// Strike:
//
//	if wait, blocked := pen.Blocked(client, now); blocked {
//		// 403 Forbidden, Retry-After: wait (the middleware's answer)
//	}
//	// ... run the checks; if one limits the request:
//	pen.Strike(client, now)
//
// After Strikes strikes within Within, the client is blocked for Base. Each
// further strike while Strikes earlier strikes are still within Within (the
// next one after the block ends, typically) blocks it again for twice as
// long, up to Max. Once fewer than Strikes of its strikes are within Within,
// the count has decayed: the next block starts at Base again.
//
// Two choices keep the backoff meaningful. A strike while the client is
// blocked is ignored: the block already answers the request, and counting
// every request of a client that keeps knocking would escalate to Max in one
// burst. And time spent blocked does not age strikes: the client could not
// offend while blocked, so a block longer than Within would otherwise
// forgive it before it could be doubled.
//
// Time is a parameter: pass the request's time. Memory is bounded: Penalty
// remembers about maxClients clients (least recently struck or checked
// forgotten first), each in about 200 bytes plus 8 per strike counted and
// the client string. A forgotten client starts afresh.
//
// Penalty is safe for concurrent use. The zero Penalty is not usable; build
// one with NewPenalty.
type Penalty struct {
	cfg    PenaltyConfig
	seed   maphash.Seed
	shards []penaltyShard
}

type penaltyShard struct {
	mu  sync.Mutex
	lru *simplelru.LRU[string, *strikes]
}

// strikes is one client's record. Times are in the client's "active time":
// Unix nanoseconds minus the total length of the blocks it was given, so
// that they do not age while it is blocked.
type strikes struct {
	times  []int64 // ring of the last cfg.Strikes strikes
	n      int     // strikes in the ring
	next   int     // where the next strike goes
	level  int     // consecutive strikes at or above the threshold
	until  int64   // blocked until, Unix ns
	length int64   // the current block's length, ns
	served int64   // total length of the blocks given, ns
}

// DefaultPenaltyClients is how many clients a penalty remembers when the
// middleware's or the gRPC interceptors' Config.PenaltyClients is zero:
// about 13 MB at a Penalty's 200 bytes per client, plus the keys.
const DefaultPenaltyClients = 65536

// penaltyShards spreads clients over locks; a power of two.
const penaltyShards = 16

// NewPenalty returns a Penalty configured by cfg (see Rules.Penalty) that
// remembers about maxClients clients. A Penalty keeps its configuration:
// when a reload changes the penalty block, build a new Penalty (the clients'
// history starts afresh).
func NewPenalty(cfg PenaltyConfig, maxClients int) (*Penalty, error) {
	var p problems
	cfg.validate(&p, "penalty")
	if err := p.err(""); err != nil {
		return nil, err
	}
	if maxClients < 1 {
		return nil, fmt.Errorf("rules: penalty maxClients must be positive, got %d", maxClients)
	}
	n := penaltyShards
	if maxClients < penaltyShards {
		n = 1
	}
	pen := &Penalty{cfg: cfg, seed: maphash.MakeSeed(), shards: make([]penaltyShard, n)}
	for i := range pen.shards {
		lru, err := simplelru.NewLRU[string, *strikes]((maxClients+n-1)/n, nil)
		if err != nil {
			return nil, fmt.Errorf("rules: penalty: %w", err)
		}
		pen.shards[i].lru = lru
	}
	return pen, nil
}

// Config returns the configuration p was built with.
func (p *Penalty) Config() PenaltyConfig { return p.cfg }

func (p *Penalty) shard(client string) *penaltyShard {
	if len(p.shards) == 1 {
		return &p.shards[0]
	}
	return &p.shards[maphash.String(p.seed, client)&(penaltyShards-1)]
}

// Strike records that client was limited at now, and blocks it if that
// makes Strikes strikes within Within. A strike while the client is blocked
// is ignored.
func (p *Penalty) Strike(client string, now time.Time) {
	t := now.UnixNano()
	s := p.shard(client)
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.lru.Get(client)
	if !ok {
		rec = &strikes{times: make([]int64, p.cfg.Strikes)}
		s.lru.Add(client, rec)
	}
	if t < rec.until {
		return
	}
	active := t - rec.served
	size := len(rec.times)
	if rec.n > 0 {
		// A clock that stepped back must not make the ring unordered.
		active = max(active, rec.times[(rec.next+size-1)%size])
	}
	within := int64(p.cfg.Within)
	// When the ring is full, its oldest strike is at next: Strikes strikes
	// are within Within if that one is.
	wasAbove := rec.n == size && active-rec.times[rec.next] <= within
	rec.times[rec.next] = active
	rec.next = (rec.next + 1) % size
	rec.n = min(rec.n+1, size)
	if rec.n < size || active-rec.times[rec.next] > within {
		rec.level = 0
		return
	}
	// A further strike while the count was already at the threshold doubles
	// the block; a count that had decayed starts again at Base.
	if wasAbove {
		rec.level++
	} else {
		rec.level = 1
	}
	d := p.blockLength(rec.level)
	rec.until, rec.length, rec.served = addSat(t, d), d, addSat(rec.served, d)
}

// addSat is a+b for b >= 0, saturating at the largest int64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// blockLength is Base doubled level-1 times, at most Max, in ns.
func (p *Penalty) blockLength(level int) int64 {
	d, ceiling := int64(p.cfg.Base), int64(p.cfg.Max)
	for i := 1; i < level && d < ceiling; i++ {
		if d > ceiling/2 {
			return ceiling
		}
		d *= 2
	}
	return min(d, ceiling)
}

// Blocked reports whether client is blocked by the penalty at now, and for
// how much longer.
func (p *Penalty) Blocked(client string, now time.Time) (retryAfter time.Duration, blocked bool) {
	t := now.UnixNano()
	s := p.shard(client)
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.lru.Get(client)
	if !ok || t >= rec.until {
		return 0, false
	}
	return time.Duration(min(rec.until-t, rec.length)), true
}
