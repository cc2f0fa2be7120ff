package sharesim

import (
	"flag"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Int64("seed", 1, "the scenario TestReplay plays, and the first TestSearch plays")
	countFlag = flag.Int("sim.count", 40, "how many scenarios TestSearch plays (make verify: 10,000)")
	// complianceFlag is the share of scenarios TestSearch lets fail on
	// compliance alone. The promise is none (make verify passes 0); the
	// protocol does not keep it yet in about 2% of scenarios (see
	// docs/accuracy.md), so make test's short run tolerates a few while it
	// holds every other check strictly.
	complianceFlag = flag.Float64("sim.compliance", 0.05, "the share of scenarios that may fail on compliance alone (make verify: 0)")
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
	failed, compliance, decisions, ops := 0, 0, 0, int64(0)
	for i := 0; i < *countFlag; i++ {
		seed := *seedFlag + int64(i)
		res := Check(Run(Generate(seed)))
		decisions += res.Decisions
		ops += res.Ops
		if res.Failed() {
			if res.BoundKept() {
				compliance++
			} else {
				failed++
			}
			if failed+compliance <= 20 {
				t.Log(res.Summary())
			}
		}
	}
	allowed := int(*complianceFlag * float64(*countFlag))
	t.Logf("%d scenarios in %v: %d failed the bound, the ledger or the protocol's checks; %d failed on compliance alone (allowed %d); %d decisions, %d ops",
		*countFlag, time.Since(start).Round(time.Millisecond), failed, compliance, allowed, decisions, ops)
	if failed > 0 || compliance > allowed {
		t.Fail()
	}
}
