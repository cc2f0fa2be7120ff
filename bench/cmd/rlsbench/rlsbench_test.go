package main

import (
	"testing"
	"time"

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
	if _, err := config.Parse("bench.yaml", []byte(benchConfig(500, []int{100, 10}))); err != nil {
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
