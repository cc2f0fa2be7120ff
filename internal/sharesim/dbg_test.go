package sharesim

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/storemodel"
	"github.com/hybridlimit/hybridlimit/reconcile"
)

var keyFlag = flag.String("key", "", "the key TestDebugStats traces")

func TestDebugStats(t *testing.T) {
	reconcile.Debug = func(s string) {
		if *keyFlag != "" && strings.Contains(s, " "+*keyFlag+" ") {
			fmt.Println(s)
		}
	}
	defer func() { reconcile.Debug = nil }()
	sc := Generate(*seedFlag)
	rec := Run(sc)
	for i, st := range rec.Stats {
		t.Logf("node %d: %+v", i, st)
	}
	for _, d := range rec.Decisions {
		if sc.Keys[sc.Requests[d.Req].Key].Name == *keyFlag {
			fmt.Printf("decision node %d lim %d sent %v at %v n=%d allowed=%v src=%d\n", d.Node, d.Limit, d.Sent, d.At, d.N, d.Allowed, d.Source)
		}
	}
	t.Log(Check(rec).Summary())
}

func TestTally(t *testing.T) {
	tally := map[string]int{}
	examples := map[string]int64{}
	for seed := int64(1); seed <= int64(*countFlag); seed++ {
		res := Check(Run(Generate(seed)))
		for _, v := range res.Violations {
			kind := strings.SplitN(v, ":", 2)[0]
			f := strings.Fields(v)
			cat := kind
			for i, w := range f {
				if strings.HasPrefix(w, "(") && i > 0 && strings.Contains(f[i-1], "]") {
					cat += " " + strings.Trim(w, "(,")
				}
				if w == "fraction" && i+1 < len(f) {
					fr := strings.Trim(f[i+1], ",")
					if fr == "1.00" || fr == "0.95" {
						cat += " f" + fr
					} else {
						cat += " f<0.95"
					}
				}
			}
			for _, a := range []string{"token_bucket", "leaky_bucket", "fixed_window", "sliding_window_counter"} {
				if strings.Contains(v, a) {
					cat += " " + a
				}
			}
			if strings.Contains(v, "waited 1") || strings.Contains(v, "waited 2") || strings.Contains(v, "waited 3") || strings.Contains(v, "waited 4") || strings.Contains(v, "waited 5") || strings.Contains(v, "waited 6") || strings.Contains(v, "waited 7") || strings.Contains(v, "waited 8") || strings.Contains(v, "waited 9") {
				if strings.Contains(v, "µs,") {
					cat += " quick"
				} else {
					cat += " slow"
				}
			}
			tally[cat]++
			if _, ok := examples[cat]; !ok {
				examples[cat] = seed
			}
		}
	}
	for k, v := range tally {
		fmt.Printf("%4d %s (seed %d)\n", v, k, examples[k])
	}
}

func TestDebugTicks(t *testing.T) {
	debugTicks = true
	defer func() { debugTicks = false }()
	Run(Generate(*seedFlag))
}

func TestDebugStore(t *testing.T) {
	storemodel.Debug = func(s string) {
		if *keyFlag == "" || strings.Contains(s, " "+*keyFlag+" ") {
			fmt.Println(s)
		}
	}
	defer func() { storemodel.Debug = nil }()
	Run(Generate(*seedFlag))
}
