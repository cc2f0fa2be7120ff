package sharesim

import (
	"flag"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Int64("seed", 1, "the scenario TestReplay plays")
	countFlag = flag.Int("sim.count", 40, "how many scenarios TestSearch plays (make verify: 10,000)")
	fromFlag  = flag.Int64("sim.from", 1, "the first seed TestSearch plays")
)

// TestReplay plays one seed and prints what happened.
func TestReplay(t *testing.T) {
	sc := Generate(*seedFlag)
	res := Check(Run(sc))
	t.Log(res.Summary())
	if res.Failed() {
		t.Fail()
	}
}

// TestSearch plays many seeds and fails on any violation.
func TestSearch(t *testing.T) {
	start := time.Now()
	failed, decisions, ops := 0, 0, int64(0)
	for i := 0; i < *countFlag; i++ {
		seed := *fromFlag + int64(i)
		res := Check(Run(Generate(seed)))
		decisions += res.Decisions
		ops += res.Ops
		if res.Failed() {
			failed++
			if failed <= 20 {
				t.Log(res.Summary())
			}
		}
	}
	t.Logf("%d scenarios in %v: %d failed; %d decisions, %d ops", *countFlag, time.Since(start).Round(time.Millisecond), failed, decisions, ops)
	if failed > 0 {
		t.Fail()
	}
}
