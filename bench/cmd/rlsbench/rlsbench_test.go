package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/bench/rlsrun"
	"github.com/hybridlimit/hybridlimit/envoyrls/config"
)

func TestRecovery(t *testing.T) {
	back := 15 * time.Second
	cases := []struct {
		name   string
		normal []bool // seconds 15, 16, ...
		want   time.Duration
	}{
		{"at once", []bool{true, true, true}, 0},
		{"after two seconds", []bool{false, false, true, true}, 2 * time.Second},
		{"a relapse counts", []bool{true, false, true, true}, 2 * time.Second},
		{"never", []bool{true, true, false}, -1},
	}
	for _, c := range cases {
		got := recovery(15, 15+len(c.normal), back, func(i int) bool { return c.normal[i-15] })
		if got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSummariseAndWindow(t *testing.T) {
	var s []sample
	for i := range 100 {
		s = append(s, sample{at: time.Duration(i) * 10 * time.Millisecond, lat: time.Duration(i+1) * time.Millisecond, err: i%50 == 0, over: i%2 == 1})
	}
	st := summarise(s, time.Second)
	if st.calls != 100 || st.errs != 2 || st.over != 50 || st.p50 != 51*time.Millisecond || st.p99 != 100*time.Millisecond || st.perSec != 100 {
		t.Fatalf("%+v", st)
	}
	w := window(s, 100*time.Millisecond, 200*time.Millisecond)
	if len(w) != 10 || w[0].at != 100*time.Millisecond {
		t.Fatalf("window: %d samples from %v", len(w), w[0].at)
	}
	if got := summarise(nil, time.Second); got.calls != 0 || got.p99 != 0 {
		t.Fatalf("%+v", got)
	}
}

func TestBenchConfigLoads(t *testing.T) {
	if _, err := config.Parse("bench.yaml", []byte(benchConfig(500, []int{100, 10}, 100))); err != nil {
		t.Fatal(err)
	}
	if _, err := floats("1000,x"); err == nil {
		t.Fatal("want an error")
	}
	fs, err := floats("1000, 2000")
	if err != nil || len(fs) != 2 || fs[1] != 2000 {
		t.Fatalf("%v %v", fs, err)
	}
}

func TestPickCases(t *testing.T) {
	got, err := pickCases("sticky, idle")
	if err != nil || len(got) != 2 || !got["sticky"] || !got["idle"] {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := pickCases("sticky,speed"); err == nil {
		t.Fatal("an unknown run: an error")
	}
}

func TestTallyCountsRefusalsWithinTheLimitOnly(t *testing.T) {
	ms := time.Millisecond
	s := []sample{
		// sent before the run's first window (as fast as the clients go,
		// they start before it): the window before, left out, not window 0
		{at: -10 * ms, lat: ms},
		// window 0, limit 3: the 2nd call refused (within), the 4th refused (past the limit)
		{at: 5 * ms, lat: ms},
		{at: 15 * ms, lat: 25 * ms, over: true},
		{at: 25 * ms, lat: ms},
		{at: 35 * ms, lat: ms, over: true},
		// window 1: an error counts as sent and late, never as refused or admitted
		{at: time.Second, err: true},
		{at: time.Second + ms, lat: ms},
		{at: time.Second + 2*ms, lat: ms, over: true},
		{at: time.Second + 3*ms, lat: ms, over: true},
		// past the last window: left out
		{at: 2 * time.Second, lat: time.Second, over: true},
	}
	got := tally(s, 3, 2)
	if got.refusedWithin != 2 || got.late != 2 || got.errs != 1 || !slices.Equal(got.admitted, []int{2, 1}) {
		t.Fatalf("%+v", got)
	}
	if got := tally(nil, 3, 2); got.refusedWithin != 0 || len(got.admitted) != 2 {
		t.Fatalf("%+v", got)
	}
}

func TestSecondOfASampleRoundsDown(t *testing.T) {
	for _, c := range []struct {
		at   time.Duration
		want int
	}{{0, 0}, {999 * time.Millisecond, 0}, {time.Second, 1}, {-time.Nanosecond, -1}, {-time.Second, -1}, {-time.Second - 1, -2}} {
		if got := secondOf(c.at); got != c.want {
			t.Errorf("secondOf(%v) = %d, want %d", c.at, got, c.want)
		}
	}
}

func TestPerReplicaDividesRedisAndKeepsTheBusiest(t *testing.T) {
	w := perReplica([]time.Duration{20 * time.Millisecond, 60 * time.Millisecond}, []int64{10 << 20, 30 << 20}, 1000, 500, 10*time.Second)
	if w.cpuEachSecond != 4*time.Millisecond || w.cpuMost != 6*time.Millisecond || w.rss != 30<<20 || w.redisCmds != 50 || w.redisUsPerSec != 25 {
		t.Fatalf("%+v", w)
	}
}

func TestReplicaReportRows(t *testing.T) {
	r := &report{o: options{replicaLimit: 100, replicaFor: 2 * time.Second}, replicas: []replicaRun{
		{kind: rlsrun.Ours, instances: 2, routing: burst, limit: 100, seconds: 2, calls: 5000, tally: windowTally{admitted: []int{101, 100}}, worst: 101, bound: 1.015, roundTrip: 500 * time.Microsecond},
		{kind: rlsrun.Ours, instances: 2, routing: roundRobin, limit: 100, offered: 100, seconds: 2, calls: 200, tally: windowTally{refusedWithin: 7, late: 1, admitted: []int{93, 100}}, worst: 100},
		{kind: rlsrun.Theirs, instances: 2, routing: roundRobin, limit: 100, offered: 100, seconds: 2, calls: 200, tally: windowTally{admitted: []int{100, 100}}, worst: 100},
	}}
	var b strings.Builder
	r.writeReplicas(&b)
	out := b.String()
	for _, want := range []string{
		"| round-robin | envoyproxy/ratelimit | 2 | 100 | 200 | 0 | 0 | 0 | 1.000 (1.00–1.00) | 1 (exact) |\n| round-robin | hybridlimit | 2 | 100 | 200 | 7 | 1 | 0 | 0.965 (0.93–1.00) | — |",
		"| every replica bursting | hybridlimit | 2 | max | 5000 | — | 0 | 0 | 1.005 (1.00–1.01) | 1.015 (round 500 µs) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
}

func TestInts(t *testing.T) {
	if got, err := ints("1, 2,4"); err != nil || !slices.Equal(got, []int{1, 2, 4}) {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := ints("1.5"); err == nil {
		t.Fatal("want an error")
	}
}
