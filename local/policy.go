package local

import "github.com/hybridlimit/hybridlimit/limit"

// policy is a validated limit with what every decision needs computed once.
// Each shard interns its policies, so an entry points at a shared one and a
// decision never divides to find an interval.
type policy struct {
	lim       limit.Limit
	interval  int64 // lim.Interval(), ns
	tolerance int64 // lim.Tolerance(), ns (buckets)
	capacity  int64 // lim.Capacity()
	period    int64 // lim.Period, ns
}

func newPolicy(lim limit.Limit) *policy {
	p := &policy{lim: lim, interval: int64(lim.Interval()), capacity: lim.Capacity(), period: int64(lim.Period)}
	if lim.Algorithm.IsBucket() {
		p.tolerance = int64(lim.Tolerance())
	}
	return p
}

// checkN reports whether n is a weight p can ever admit.
func (p *policy) checkN(n int64) error {
	if n < 0 || n > p.capacity {
		return p.lim.CheckN(n)
	}
	return nil
}
