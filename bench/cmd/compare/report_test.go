package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/bench/contender"
	"github.com/hybridlimit/hybridlimit/bench/measure"
)

func fakeResults(t *testing.T) ([]*result, options) {
	o := options{count: 1, benchtime: time.Millisecond, load: time.Millisecond, goroutines: 2, fleet: time.Second, nodes: 4,
		policy: contender.Policy{Rate: 1000, Burst: 100}, benchKeys: 10, only: regexp.MustCompile("")}
	var rs []*result
	for i, c := range contender.All() {
		r := &result{c: c, NsPerOp: float64(100 * (i + 1)), NsMin: 90, NsMax: float64(200 * (i + 1)), AllocsPerOp: 1,
			Par: &measure.ParallelResult{Ops: 1000, Elapsed: time.Second}, Fleet: &measure.FleetResult{Bucket: 100 * time.Millisecond, Buckets: make([]int64, 10)},
			FleetLimit: 1100, FleetExactOwn: 1100}
		for j := range 1000 {
			r.Par.Latency.Record(time.Duration(j+1) * time.Microsecond)
			r.Fleet.Latency.Record(time.Duration(j+1) * time.Microsecond)
		}
		r.Fleet.Admitted, r.Fleet.Offered = 1100, 2000
		rs = append(rs, r)
	}
	return rs, o
}

func TestReportHasEveryTable(t *testing.T) {
	rs, o := fakeResults(t)
	var b strings.Builder
	rep := report{opts: o, clock: rs[0].Par, results: rs, plot: "x.png"}
	if err := rep.write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"## Side by side", "## Accuracy", "## Local vs distributed, measured", "| Local only |", "| Redis sync |", "| Redis async |",
		"![p99 latency"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, c := range contender.All() {
		if !strings.Contains(out, "| "+c.Name+" |") {
			t.Errorf("report lacks a row for %s", c.Name)
		}
	}
}

func TestPlotWrites(t *testing.T) {
	rs, o := fakeResults(t)
	for _, name := range []string{"p.png", "p.svg"} {
		if err := drawPlot(filepath.Join(t.TempDir(), name), rs, o); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
