package sharesim

import (
	"flag"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/storemodel"
	"github.com/hybridlimit/hybridlimit/share"
)

var (
	seedFlag  = flag.Int64("seed", shortFrom, "the scenario TestReplay plays, and the first TestSearch plays")
	traceFlag = flag.String("story", "", "TestReplay: the key whose story (ops, answers, calls heard, decisions) to print")
	countFlag = flag.Int("sim.count", shortCount, "how many scenarios TestSearch plays (make verify: 10,000)")
	showFlag  = flag.Int("sim.show", 20, "how many failing scenarios TestSearch prints")
	claimFlag = flag.Bool("sim.claimheard", false, "TestSearch, TestReplay: every op claims its node heard every reset (the store takes no state as from before one, as before 8ba624f), to show the checks catch it")
)

// play runs sc on the Go model: as Run, or with -sim.claimheard as
// runClaimingHeard.
func play(sc *Scenario) *Record {
	if *claimFlag {
		return runClaimingHeard(sc)
	}
	return Run(sc)
}

// playTraced runs sc as RunTraced does, on claimHeard with
// -sim.claimheard.
func playTraced(sc *Scenario, key string) *Record {
	if *claimFlag {
		return runOn(sc, claimHeard{ModelStore{storemodel.New(share.Duration(sc.ActiveWindow))}}, key)
	}
	return RunTraced(sc, key)
}

// TestReplay plays one seed and prints what happened.
func TestReplay(t *testing.T) {
	sc := Generate(*seedFlag)
	var rec *Record
	if *traceFlag != "" {
		rec = playTraced(sc, *traceFlag)
		t.Logf("the story of %s:\n%s", *traceFlag, strings.Join(rec.Trace, "\n"))
	} else {
		rec = play(sc)
	}
	res := Check(rec)
	t.Log(res.Summary())
	if res.Failed() {
		t.Fail()
	}
}

// The short run make test plays: seeds shortFrom to shortFrom+shortCount-1.
const (
	shortFrom  = 1
	shortCount = 40
)

// knownShort are the short run's scenarios that fail today, each with the
// class of its failure: the share protocol does not keep these promises
// yet (see each seed's replay). The short run fails if any other scenario
// fails, so the count can only go down; when the protocol is fixed, remove
// the seeds that pass (the test says which).
var knownShort = map[int64]string{
	4:  "compliance: FleetSize 3, a node joining late: the store reserves its even split and answers wait; a burst waits AskWait and is refused",
	18: "compliance: random, at the limit: demand moving between nodes, told call",
	34: "compliance: FleetSize set, a node joining late (as seed 4)",
	31: "compliance: a leaky bucket's home misses the call on the channel (1 in 50) and answers only after the asker calls again, half an interval on; the request the pool then serves is charged when the room came, not when it asked, and the next, 12 ms after it, is refused",
}

// search plays seeds from to from+count-1 on every CPU and returns the
// results in seed order.
func search(from int64, count int) []*Result {
	out := make([]*Result, count)
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				out[i] = Check(play(Generate(from + int64(i))))
			}
		})
	}
	for i := range count {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// TestSearch plays many seeds and prints what they sent, what the checks
// judged and every failure by class; it fails on any violation, but in the
// short run (make test) on more than the known ones.
func TestSearch(t *testing.T) {
	start := time.Now()
	results := search(*seedFlag, *countFlag)
	took := time.Since(start)
	var cov Coverage
	classes := map[string][]int64{} // the failing seeds of each class
	failed, decisions, ops := 0, 0, int64(0)
	shown := 0
	for _, res := range results {
		cov.Add(&res.Coverage)
		decisions += res.Decisions
		ops += res.Ops
		if !res.Failed() {
			continue
		}
		failed++
		for _, c := range res.Classes {
			classes[c] = append(classes[c], res.Scenario.Seed)
		}
		if shown < *showFlag {
			shown++
			t.Log(res.Summary())
		}
	}
	t.Logf("%d scenarios (seeds %d to %d) in %v on %d CPUs: %d failed; %d decisions, %d ops\n%v",
		*countFlag, *seedFlag, *seedFlag+int64(*countFlag)-1, took.Round(time.Millisecond), runtime.GOMAXPROCS(0), failed, decisions, ops, &cov)
	var b strings.Builder
	for _, c := range slices.Sorted(maps.Keys(classes)) {
		seeds := classes[c]
		fmt.Fprintf(&b, "\n  %s: %d scenarios (%.2f%%), seeds %v", c, len(seeds), 100*float64(len(seeds))/float64(*countFlag), seeds[:min(len(seeds), 8)])
	}
	if len(classes) > 0 {
		t.Logf("failures by class (a scenario may fail in several):%s", b.String())
	}
	short := *seedFlag == shortFrom && *countFlag == shortCount
	if !short {
		if failed > 0 {
			t.Errorf("%d of %d scenarios failed", failed, *countFlag)
		}
		return
	}
	var unknown []int64
	for _, res := range results {
		if _, known := knownShort[res.Scenario.Seed]; res.Failed() && !known {
			unknown = append(unknown, res.Scenario.Seed)
		} else if known && !res.Failed() {
			t.Logf("seed %d passes now (%s): remove it from knownShort", res.Scenario.Seed, knownShort[res.Scenario.Seed])
		}
	}
	t.Logf("known failures: %d of %d scenarios fail, %d of them known (the protocol's open defects), %d known", failed, *countFlag, failed-len(unknown), len(knownShort))
	if len(unknown) > 0 {
		t.Errorf("scenarios failing beyond the %d known: seeds %v", len(knownShort), unknown)
	}
}
