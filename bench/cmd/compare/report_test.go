package main

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/bench/contender"
	"github.com/hybridlimit/hybridlimit/bench/measure"
	"github.com/hybridlimit/hybridlimit/internal/workload"
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

// The many-keys workload runs every contender that keeps its state in
// Redis, our Async at the workload's interval, and the report gives each
// its Redis CPU and commands per decision.
func TestManyKeysSection(t *testing.T) {
	rs, o := fakeResults(t)
	o.many = keysOptions{keys: 1000, zipf: 1.1, rate: 2000, policy: contender.Policy{Rate: 10, Burst: 10},
		duration: time.Second, interval: 20 * time.Millisecond, timeout: time.Second}
	cs := keysContenders(o, contender.All())
	var names []string
	for _, c := range cs {
		if !c.Distributed {
			t.Errorf("%s keeps no state in Redis", c.Name)
		}
		names = append(names, c.Name)
	}
	for _, want := range []string{"hybridlimit Sync", "hybridlimit Async 20ms", "go-redis/redis_rate", "ulule/limiter redis", "throttled GCRA goredisstore"} {
		if !slices.Contains(names, want) {
			t.Errorf("many keys lacks %s: %v", want, names)
		}
	}
	var many []*keysResult
	for _, c := range cs {
		r := &keysResult{c: c, tot: workload.Totals{Decisions: 20000, Admitted: 10000, Elapsed: 10 * time.Second},
			redis: workload.RedisCost{CPU: 200 * time.Millisecond, Calls: 40000, Scripts: 20000}}
		r.tot.Latency.Record(time.Microsecond)
		many = append(many, r)
	}
	var b strings.Builder
	rep := report{opts: o, clock: rs[0].Par, results: rs, many: many}
	if err := rep.write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"## Many keys: Redis's work per decision", "from 1000 keys with Zipf skew s = 1.1", "| hybridlimit Async 20ms | 2.0k (0) | 50.0% |",
		"| **10.00 µs** | 2.000 (1.000) | 2.0% |"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out[strings.Index(out, "## Many keys"):])
		}
	}
	if s := exactShare(o.many); s <= 0 || s >= 1 {
		t.Errorf("an exact limiter admits %v of the decisions: want a share below one", s)
	}
}
