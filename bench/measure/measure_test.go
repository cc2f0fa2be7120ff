package measure

import (
	"context"
	"regexp"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=500,usec_per_call=50.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hmget:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n"
	s := ParseCommandStats(info)
	if s.Calls != 20 || s.Usec != 520 || s.By["evalsha"] != 10 || s.By["info"] != 0 {
		t.Fatalf("got %+v, want 20 calls, 520 usec, the harness's INFO and CONFIG left out", s)
	}
}

func TestFleetCountsWhatItOffers(t *testing.T) {
	var calls atomic.Int64
	allow := func(context.Context, string) (bool, error) { return calls.Add(1)%2 == 0, nil }
	r, err := Fleet(context.Background(), []AllowFunc{allow, allow}, FleetRun{Key: "k", Rate: 2000, Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Offered != calls.Load() || r.Offered < 900 || r.Offered > 1000 {
		t.Fatalf("offered %d (calls %d), want about 2000/s × 0.5 s", r.Offered, calls.Load())
	}
	if d := r.Admitted - r.Offered/2; d < -1 || d > 1 {
		t.Fatalf("admitted %d of %d, want half", r.Admitted, r.Offered)
	}
	var sum int64
	for _, b := range r.Buckets {
		sum += b
	}
	if sum != r.Admitted || r.MaxWindow(time.Second) != r.Admitted {
		t.Fatalf("buckets sum to %d, max window %d, admitted %d", sum, r.MaxWindow(time.Second), r.Admitted)
	}
	if r.Latency.Count() != uint64(r.Offered) {
		t.Fatalf("%d latencies for %d decisions", r.Latency.Count(), r.Offered)
	}
}

func TestParallelRecordsEveryCall(t *testing.T) {
	var calls atomic.Int64
	r := Parallel(context.Background(), func(context.Context, string) (bool, error) { calls.Add(1); return true, nil },
		[]string{"a", "b"}, 4, 50*time.Millisecond)
	if r.Ops == 0 || r.Ops != calls.Load() || r.Latency.Count() != uint64(r.Ops) || r.Denied != 0 {
		t.Fatalf("ops %d, calls %d, latencies %d, denied %d", r.Ops, calls.Load(), r.Latency.Count(), r.Denied)
	}
}

// A generator that wakes after the run's end (a loaded machine: its first
// tick came late) still offers what it owed up to the end, rather than
// nothing: 200,000 a second over two nodes for 1 ms, the first tick at 2 ms.
func TestFleetOffersWhatWasOwedWhenItsTickIsLate(t *testing.T) {
	allow := func(context.Context, string) (bool, error) { return true, nil }
	r, err := Fleet(context.Background(), []AllowFunc{allow, allow}, FleetRun{Key: "k", Rate: 200_000, Duration: time.Millisecond, Tick: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Offered < 198 || r.Offered > 200 {
		t.Fatalf("offered %d, want 200", r.Offered)
	}
}

func TestCommitNamesHEAD(t *testing.T) {
	c := Commit()
	if !regexp.MustCompile(`^[0-9a-f]{12}(\+changes)?$`).MatchString(c) && c != "unknown (not a git checkout)" {
		t.Fatalf("Commit() = %q, want 12 hex digits (+changes)", c)
	}
}
