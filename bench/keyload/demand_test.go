package keyload

import (
	"testing"
	"time"
)

// ByDemand classes keys by their offered rate in the measured part (a
// limit of 2/s over 4 nodes: a node's even split is 0.5/s) and splits the
// exact comparison and the waits by class.
func TestByDemand(t *testing.T) {
	ms := time.Millisecond
	s := &Stream{Spec: Spec{Keys: 4, Nodes: 4}, Duration: 4 * time.Second, Measured: 1}
	s.Requests = append(s.Requests, Request{At: -ms, Key: 2}) // warm-up: not counted, spends key 2's token
	for i := range 12 {                                       // key 0: 3/s, over the limit
		s.Requests = append(s.Requests, Request{At: time.Duration(i) * 300 * ms, Key: 0})
	}
	s.Requests = append(s.Requests,
		Request{At: 0, Key: 1}, Request{At: 2 * ms, Key: 1}, Request{At: 3 * time.Second, Key: 1}, // key 1: 0.75/s
		Request{At: 100 * ms, Key: 2}, // key 2: 0.25/s, refused by the exact limiter (its token is back at 499 ms)
	)
	// key 3 is never offered.
	out := make([]Outcome, len(s.Requests))
	waits := make([]bool, len(s.Requests))
	for i := range out {
		out[i] = Admitted
	}
	waits[2] = true  // a request of key 0
	waits[14] = true // key 1's second
	out[14] = Refused
	by, err := ByDemand(s, out, waits, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	// key 0: 12 requests 300 ms apart against a token every 500 ms, burst
	// 1: the fleet admitted all 12, the exact limiter what this counts.
	exact0 := int64(0)
	tat := int64(-1 << 62)
	for i := range 12 {
		at := int64(i) * int64(300*ms)
		if next := max(tat, at) + int64(500*ms); next-at <= int64(500*ms) {
			tat, exact0 = next, exact0+1
		}
	}
	want := [NumDemands]DemandClass{
		WithinSplit: {Keys: 1, Decided: 1, Admitted: 1, Exact: 0, Over: 1},
		OverSplit:   {Keys: 1, Decided: 3, Waited: 1, Admitted: 2, Exact: 2},
		OverLimit:   {Keys: 1, Decided: 12, Waited: 1, Admitted: 12, Exact: exact0, Over: 12 - exact0},
	}
	if by != want {
		t.Errorf("got  %+v\nwant %+v", by, want)
	}
	if _, err := ByDemand(s, out, waits[:3], 2, 1); err == nil {
		t.Error("waits of another length: no error")
	}
	if _, err := ByDemand(s, out[:3], nil, 2, 1); err == nil {
		t.Error("outcomes of another length: no error")
	}
}
