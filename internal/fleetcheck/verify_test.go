package fleetcheck

import (
	"flag"
	"fmt"
	"testing"
	"time"
)

// The fixed set runs in `make test`; the long randomized run only when
// asked for how many scenarios (`make verify`).

var (
	verifyCount = flag.Int("verify.count", 0, "TestVerify: how many scenarios to run (0: skip)")
)

// fixedSeeds cover the shapes in a handful of scenarios (see Scenario.String
// for what each holds).
var fixedSeeds = []int64{
	4,  // async, kill/conservative, no FleetSize, hot node, stale shares, compliant hopping, key churn
	7,  // async, kill/fail-open, no FleetSize, hot node, several limits on one key, weighted, key churn
	2,  // sync, pause/fail-closed, stale shares, compliant, key churn, idle keys
	9,  // local only, MaxKeys 64: key churn, idle keys, weighted, compliant
	22, // async, 8 nodes, pause/fail-closed, stale shares, migrating traffic, several limits, compliant bursts
	18, // async, slow (+100 ms)/conservative, weighted, several limits, compliant bursts, nodes joining and leaving
	25, // async, 8 nodes, ActiveWindow 200 ms, stale shares, weighted, the log refused
	21, // async, pause/conservative, on-off bursts, weighted, several limits, compliant hopping
	// async, 2 nodes, pause/fail-open, MaxKeys 128, ActiveWindow 300 ms, idle
	// 1/h keys, compliant bursts: a contest restarted once its records were merely quiet for
	// the active window, while nodes still held their splits (2 admitted
	// against a bound of 1.5)
	20261138,
}

func TestFixedSet(t *testing.T) {
	var tally Tally
	for _, seed := range fixedSeeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			res := runChecked(t, seed)
			tally.Add(res.Result, res.took)
		})
	}
	t.Logf("\n%v", &tally)
}

// TestVerify runs -verify.count scenarios from -seed on and reports
// what they found: `make verify`.
func TestVerify(t *testing.T) {
	if *verifyCount <= 0 {
		t.Skip("the long run: make verify (or -verify.count=N)")
	}
	first := *seedFlag
	if first == 0 {
		first = time.Now().UnixNano() % 1_000_000_000
	}
	t.Logf("seeds %d to %d", first, first+int64(*verifyCount)-1)
	var tally Tally
	for seed := first; seed < first+int64(*verifyCount); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			res := runChecked(t, seed)
			tally.Add(res.Result, res.took)
		})
	}
	fmt.Printf("\nseeds %d to %d\n%v", first, first+int64(*verifyCount)-1, &tally)
}

type checked struct {
	*Result
	took time.Duration
}

// runChecked runs and checks seed's scenario, failing t with the summary
// (seed and replay command included) if it broke a promise.
func runChecked(t *testing.T, seed int64) checked {
	sc := Generate(seed)
	rec := Run(t, sc)
	res := Check(rec)
	if res.Failed() {
		t.Errorf("%s", res.Summary())
	} else {
		t.Logf("%s", res.Summary())
	}
	return checked{res, rec.Took}
}
