package keyload

import "fmt"

// Demand is a class of keys by what the stream offered them in its measured
// part, against their limit: where a protocol that shares the limit among
// the nodes has to move room (or refuse), and where it need not.
type Demand uint8

const (
	// WithinSplit: the key's offered rate is at most a node's even split
	// of its limit's rate (rate/nodes): every node's share holds it, if it
	// is spread.
	WithinSplit Demand = iota
	// OverSplit: above a node's even split, at most the limit: the fleet has
	// room for it, moved to where the requests are.
	OverSplit
	// OverLimit: above the limit: the fleet refuses some of it whatever it
	// does.
	OverLimit
	NumDemands
)

func (d Demand) String() string {
	switch d {
	case WithinSplit:
		return "within a node's even split"
	case OverSplit:
		return "over a node's split, within the limit"
	case OverLimit:
		return "over the limit"
	}
	return fmt.Sprintf("Demand(%d)", int(d))
}

// DemandClass is what became of the measured part's decided requests of
// one class of keys.
type DemandClass struct {
	Keys            int
	Decided, Waited int64
	Admitted, Exact int64 // by the fleet; by one exact limiter (CompareExact's)
	Over, Under     int64 // summed key by key, as Accuracy's
}

// ByDemand splits CompareExact's comparison, and the requests that waited,
// by the class of their key's demand. waits may be nil (nothing waited).
func ByDemand(s *Stream, out []Outcome, waits []bool, rate, burst int64) ([NumDemands]DemandClass, error) {
	var by [NumDemands]DemandClass
	if waits != nil && len(waits) != len(s.Requests) {
		return by, fmt.Errorf("keyload: %d waits for %d requests", len(waits), len(s.Requests))
	}
	offered := make([]int32, s.Spec.Keys)
	for _, r := range s.Requests[s.Measured:] {
		offered[r.Key]++
	}
	class := make([]Demand, s.Spec.Keys)
	for k, n := range offered {
		perSec := float64(n) / s.Duration.Seconds()
		switch {
		case perSec > float64(rate):
			class[k] = OverLimit
		case perSec*float64(s.Spec.Nodes) > float64(rate):
			class[k] = OverSplit
		}
		if n > 0 {
			by[class[k]].Keys++
		}
	}
	fleet := make([]int32, s.Spec.Keys)
	exact := make([]int32, s.Spec.Keys)
	err := judge(s, out, rate, burst, func(i int, ok bool) {
		k := s.Requests[i].Key
		c := &by[class[k]]
		c.Decided++
		if waits != nil && waits[i] {
			c.Waited++
		}
		if ok {
			c.Exact++
			exact[k]++
		}
		if out[i] == Admitted {
			c.Admitted++
			fleet[k]++
		}
	})
	if err != nil {
		return by, err
	}
	apart(fleet, exact, func(k int, over, under int64) {
		by[class[k]].Over += over
		by[class[k]].Under += under
	})
	return by, nil
}
