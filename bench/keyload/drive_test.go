package keyload

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every request reaches the node the stream names, with its key; the
// outcomes, counts and sources are what the nodes answered; OnMeasure is
// called; a node that keeps up leaves nothing unanswered.
func TestDriveSendsEachRequestToItsNode(t *testing.T) {
	s := mustGenerate(t, Spec{Nodes: 3, Keys: 50, Zipf: 1, Rate: 3000, Routing: Pinned, Seed: 2}, 0, 100*time.Millisecond, 300*time.Millisecond)
	var mu sync.Mutex
	got := map[string][]int{} // key: nodes that saw it
	var measured atomic.Bool
	nodes := make([]Node, 3)
	for n := range nodes {
		nodes[n] = func(_ context.Context, key string) (Answer, error) {
			mu.Lock()
			got[key] = append(got[key], n)
			mu.Unlock()
			switch {
			case key == "user:3":
				return Answer{}, errors.New("boom")
			case len(key)%2 == 0: // user:1 to user:9 refused
				return Answer{Allowed: false, Source: Remote, Waited: true}, nil
			case key == "user:10":
				return Answer{Allowed: true, Source: Local, Waited: true}, nil
			}
			return Answer{Allowed: true, Source: Local}, nil
		}
	}
	res, err := Drive(context.Background(), nodes, s, Config{OnMeasure: func() { measured.Store(true) }})
	if err != nil {
		t.Fatal(err)
	}
	if !measured.Load() {
		t.Error("OnMeasure was not called")
	}
	for key, ns := range got {
		for _, n := range ns {
			if want := int(pin(keyRank(t, key), 3)); n != want {
				t.Fatalf("%s reached node %d, not %d", key, n, want)
			}
		}
	}
	var admitted, errs, refused, waitedLocal int64
	for i, r := range s.Requests[s.Measured:] {
		o := res.Outcomes[s.Measured+i]
		name := s.Names[r.Key]
		if name == "user:10" {
			waitedLocal++
		}
		switch {
		case name == "user:3":
			errs++
			if o != Failed {
				t.Fatalf("%s: %v", name, o)
			}
		case len(name)%2 == 0:
			refused++
			if o != Refused {
				t.Fatalf("%s: %v", name, o)
			}
		default:
			admitted++
			if o != Admitted {
				t.Fatalf("%s: %v", name, o)
			}
		}
	}
	if res.Offered != int64(s.Offered()) || res.Decided != res.Offered || res.Unanswered() != 0 || res.Shed != 0 || res.Late != 0 {
		t.Errorf("offered %d (stream %d), decided %d, shed %d, late %d", res.Offered, s.Offered(), res.Decided, res.Shed, res.Late)
	}
	if res.Admitted != admitted || res.Errors != errs || res.Sources[Remote] != refused || res.Sources[Local] != admitted || res.Sources[Unknown] != errs {
		t.Errorf("admitted %d errors %d sources %v; want %d, %d, remote %d", res.Admitted, res.Errors, res.Sources, admitted, errs, refused)
	}
	if res.Waited != refused+waitedLocal || res.FromMemory != admitted-waitedLocal {
		t.Errorf("waited %d, from memory %d; want %d, %d", res.Waited, res.FromMemory, refused+waitedLocal, admitted-waitedLocal)
	}
	if res.FirstError == nil || res.Latency.Count() != uint64(res.Decided) || res.Service.Count() != uint64(res.Decided) {
		t.Errorf("first error %v, %d latencies, %d service times, %d decided", res.FirstError, res.Latency.Count(), res.Service.Count(), res.Decided)
	}
	if res.Answered < res.Decided || res.Answered > res.Decided+int64(s.Measured) { // and warm-up requests answered after 0
		t.Errorf("%d answers from the measured part's start, %d decided in it", res.Answered, res.Decided)
	}
	if res.Elapsed < 290*time.Millisecond {
		t.Errorf("the measured part's last answer came %v after its start: before its last request was due", res.Elapsed)
	}
}

func keyRank(t *testing.T, name string) int32 {
	var k int32
	for _, c := range name[len("user:"):] {
		k = k*10 + c - '0'
	}
	return k - 1
}

// A node that keeps its callers waiting shows as latency from each
// request's scheduled send time: one worker, a node that takes 20 ms a
// call, offered 200 a second (four times what it serves) for 300 ms. A
// closed-loop measure (time around the call) says 20 ms; the callers
// waited for the queue too, longer and longer.
func TestDriveMeasuresFromTheSchedule(t *testing.T) {
	s := mustGenerate(t, Spec{Nodes: 1, Keys: 10, Rate: 200, Seed: 1}, 0, 0, 300*time.Millisecond)
	slow := func(ctx context.Context, _ string) (Answer, error) {
		time.Sleep(20 * time.Millisecond)
		return Answer{Allowed: true}, nil
	}
	res, err := Drive(context.Background(), []Node{slow}, s, Config{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Decided != res.Offered || res.Answered != res.Decided {
		t.Fatalf("decided %d of %d, %d answers: the drain should answer every one", res.Decided, res.Offered, res.Answered)
	}
	// 60 requests served one after the other, 20 ms or more each: the
	// last is answered at least 60 × 20 ms after the first was due (at 0),
	// and was due at 295 ms: it waited at least 905 ms.
	if p100 := res.Latency.Quantile(1); p100 < 900*time.Millisecond {
		t.Errorf("slowest latency %v: the queue's wait is not counted", p100)
	}
	svc := res.Service.Quantile(0.99)
	if p50, _ := res.Quantile(0.5); p50 < 5*svc/2 {
		t.Errorf("median latency %v, service time p99 %v: want the wait for the worker in the latency", p50, svc)
	}
}

// A node stuck past the drain leaves requests unanswered: the queue's
// overflow is shed (never sent) and what is still queued at the drain's end
// is late; both count as unanswered, and a quantile among them says so.
func TestDriveCountsUnansweredRequests(t *testing.T) {
	s := mustGenerate(t, Spec{Nodes: 1, Keys: 10, Rate: 1000, Seed: 1}, 0, 0, 100*time.Millisecond)
	release := make(chan struct{})
	var calls atomic.Int64
	stuck := func(ctx context.Context, _ string) (Answer, error) {
		if calls.Add(1) == 1 {
			<-release
		}
		return Answer{Allowed: true}, nil
	}
	time.AfterFunc(300*time.Millisecond, func() { close(release) })
	res, err := Drive(context.Background(), []Node{stuck}, s, Config{Workers: 1, Queue: 10, Drain: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Decided != 1 || res.Shed != res.Offered-11 || res.Late != 10 || res.Unanswered() != res.Offered-1 {
		t.Errorf("offered %d: decided %d, shed %d, late %d", res.Offered, res.Decided, res.Shed, res.Late)
	}
	if calls.Load() != 1 {
		t.Errorf("%d calls: a late request was sent", calls.Load())
	}
	if _, ok := res.Quantile(0.5); ok {
		t.Error("the median of requests nearly all unanswered was given as a latency")
	}
	if d, ok := res.Quantile(0.001); !ok || d < 250*time.Millisecond {
		t.Errorf("the one answer: %v, %v", d, ok)
	}
	for i := 1; i < len(res.Outcomes); i++ {
		if res.Outcomes[i] != Unanswered {
			t.Fatalf("request %d: %v", i, res.Outcomes[i])
		}
	}
}

// Cancelled, Drive returns with the context's error and every goroutine
// gone (goleak, in TestMain).
func TestDriveStopsWithItsContext(t *testing.T) {
	s := mustGenerate(t, Spec{Nodes: 2, Keys: 10, Rate: 1000, Seed: 1}, 0, 0, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	ok := func(context.Context, string) (Answer, error) { return Answer{Allowed: true}, nil }
	start := time.Now()
	_, err := Drive(ctx, []Node{ok, ok}, s, Config{OnMeasure: func() {}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("returned after %v", time.Since(start))
	}
}

// A node that cannot keep up carries the warm-up's backlog into the
// measured part: its answers from then on are warm-up requests first, so
// what the stretch's work paid for is counted by answer (Answered), not by
// request (Decided).
func TestDriveCountsAnswersAfterTheStart(t *testing.T) {
	s := mustGenerate(t, Spec{Nodes: 1, Keys: 10, Rate: 200, Seed: 1}, 0, 200*time.Millisecond, 100*time.Millisecond)
	slow := func(ctx context.Context, _ string) (Answer, error) {
		time.Sleep(10 * time.Millisecond) // 100 a second: half the rate
		return Answer{Allowed: true}, nil
	}
	res, err := Drive(context.Background(), []Node{slow}, s, Config{Workers: 1, Drain: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// 40 warm-up requests take 400 ms or more: at 0, about 20 are still
	// queued, and the 300 ms that follow answer about 30 requests, nearly
	// all of the warm-up.
	if res.Answered <= res.Decided || res.Answered < 10 {
		t.Errorf("%d answers after the start, %d of them to the measured part's %d requests", res.Answered, res.Decided, res.Offered)
	}
}
