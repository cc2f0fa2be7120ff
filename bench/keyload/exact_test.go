package keyload

import (
	"testing"
	"time"
)

// The exact limiter: a token bucket per key over the decided requests at
// their scheduled instants, the warm-up included; both sides summed key by
// key, so one key's excess does not hide another's shortfall.
func TestCompareExact(t *testing.T) {
	ms := time.Millisecond
	s := &Stream{Spec: Spec{Keys: 3}, Requests: []Request{
		{At: -400 * ms, Key: 0}, // warm-up: spends key 0's one token
		{At: 0, Key: 0},         // exact: refused (the token is back at 100 ms)
		{At: 0, Key: 1},         // exact: admitted
		{At: 1 * ms, Key: 1},    // exact: refused
		{At: 2 * ms, Key: 2},    // unanswered: left out
		{At: 3 * ms, Key: 2},    // exact: admitted (the one before was not decided)
		{At: 600 * ms, Key: 0},  // exact: admitted
	}, Measured: 1}
	out := []Outcome{Admitted, Admitted, Refused, Admitted, Unanswered, Failed, Admitted}
	acc, err := CompareExact(s, out, 2, 1) // 2/s burst 1: a token every 500 ms
	if err != nil {
		t.Fatal(err)
	}
	// key 0: fleet 2, exact 1 (over 1); key 1: fleet 1 (the second), exact
	// 1 (the first); key 2: fleet 0, exact 1 (under 1)
	want := Accuracy{Decided: 5, Admitted: 3, Exact: 3, Over: 1, Under: 1, OverKeys: 1, UnderKeys: 1}
	if acc != want {
		t.Errorf("got %+v, want %+v", acc, want)
	}
	if _, err := CompareExact(s, out[:3], 2, 1); err == nil {
		t.Error("outcomes of another length: no error")
	}
	if _, err := CompareExact(s, out, 0, 1); err == nil {
		t.Error("a zero rate: no error")
	}
}
