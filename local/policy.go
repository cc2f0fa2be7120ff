package local

import (
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// policy is a validated limit with what every decision needs computed once.
// Each shard interns its policies, so an entry points at a shared one and a
// decision never divides to find an interval.
type policy struct {
	lim       limit.Limit
	interval  int64 // lim.Interval(), ns
	tolerance int64 // lim.Tolerance(), ns (buckets)
	capacity  int64 // lim.Capacity()
	period    int64 // lim.Period, ns

	// Calendar limits: the zone, and the windows last seen, cached under the
	// shard's lock (a policy belongs to one shard) so that a decision finds
	// its window without reading the zone's rules.
	loc       *time.Location
	cur, next limit.Window
}

// newPolicy returns lim's policy, resolving a calendar limit's zone in
// zones.
func newPolicy(lim limit.Limit, zones *limit.Zones) (*policy, error) {
	p := &policy{lim: lim, interval: int64(lim.Interval()), capacity: lim.Capacity(), period: int64(lim.Period)}
	if lim.Algorithm.IsBucket() {
		p.tolerance = int64(lim.Tolerance())
	}
	if lim.Calendar != limit.NoCalendar {
		loc, err := zones.Load(lim.Zone)
		if err != nil {
			return nil, err
		}
		p.loc = loc
	}
	return p, nil
}

// is reports whether p is the policy of lim, in its canonical form or not
// (a bucket's Burst equal to its Rate is the same limit as Burst zero):
// p.lim == lim.Canonical(), without copying lim.
func (p *policy) is(lim *limit.Limit) bool {
	q := &p.lim
	if q.Rate != lim.Rate || q.Period != lim.Period || q.Algorithm != lim.Algorithm {
		return false
	}
	if q.Burst != lim.Burst && (q.Burst != 0 || lim.Burst != lim.Rate || !lim.Algorithm.IsBucket()) {
		return false
	}
	return q.Calendar == lim.Calendar && q.Zone == lim.Zone
}

// checkN reports whether n is a weight p can ever admit.
func (p *policy) checkN(n int64) error {
	if n < 0 || n > p.capacity {
		return p.lim.CheckN(n)
	}
	return nil
}

// calendar reports whether p's windows follow a calendar.
func (p *policy) calendar() bool { return p.loc != nil }

// index returns the index of the window holding now: limit.Limit.WindowAt,
// cached for calendar limits.
func (p *policy) index(now int64) int64 {
	if !p.calendar() {
		return now / p.period
	}
	if p.cur.Start <= now && now < p.cur.End {
		return p.cur.Index
	}
	p.cur = p.lim.WindowAt(now, p.loc)
	if p.next.Index != p.cur.Index+1 {
		p.next = p.lim.WindowOf(p.cur.Index+1, p.loc)
	}
	return p.cur.Index
}

// bounds returns where window i starts and ends: limit.Limit.WindowOf,
// cached for the calendar windows last seen.
func (p *policy) bounds(i int64) (start, end int64) {
	if !p.calendar() {
		return i * p.period, (i + 1) * p.period
	}
	switch {
	case p.cur.End != 0 && i == p.cur.Index:
		return p.cur.Start, p.cur.End
	case p.next.End != 0 && i == p.next.Index:
		return p.next.Start, p.next.End
	}
	w := p.lim.WindowOf(i, p.loc)
	return w.Start, w.End
}

// refill is how long the whole capacity takes to come back: the buckets'
// tolerance, a window's period (a calendar unit's nominal length).
func (p *policy) refill() time.Duration {
	switch {
	case p.tolerance > 0:
		return time.Duration(p.tolerance)
	case p.calendar():
		return p.lim.Calendar.Nominal()
	}
	return time.Duration(p.period)
}
