package fleetcheck

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Tally sums the results of many scenarios for a long run's report. The zero
// value is ready to use; it is not safe for concurrent use.
type Tally struct {
	Scenarios, Failed int
	Series, Windows   int
	Worst             Excess
	// WorstBy is the largest excess per shape (Key.Shape), and ViolatedBy
	// how many scenarios broke the bound on a key of that shape.
	WorstBy    map[string]Excess
	ViolatedBy map[string]int
	// WorstFault is the largest excess on keys under one limit, per mode,
	// fault and fallback ("async kill/conservative", "sync none").
	WorstFault         map[string]Excess
	Compliant, Refused int
	RefusedSeeds       []int64
	NotConforming      int
	LedgerChecked      int
	LedgerUnknown      int
	LedgerSeeds        []int64
	Kinds              map[string]int // violations by kind
	Failures           []string       // one line per failed scenario
	Took               time.Duration
	// Shapes counts the scenarios drawing on each shape, mode, fault and
	// change of the fleet (Scenario.Shapes); Routes the compliant streams
	// of each route and CompliantBy their decisions checked; Excluded the
	// decisions of compliant streams left out, by why.
	Shapes, Routes, CompliantBy, Excluded map[string]int
	// OverForgotten counts the churning keys over the bound after the
	// nodes forgot evictions (Result.OverForgotten), reported apart.
	OverForgotten int
}

// Add counts one scenario's result, which took took.
func (t *Tally) Add(r *Result, took time.Duration) {
	if t.WorstBy == nil {
		t.WorstBy, t.ViolatedBy, t.WorstFault, t.Kinds = map[string]Excess{}, map[string]int{}, map[string]Excess{}, map[string]int{}
		t.Shapes, t.Routes, t.CompliantBy, t.Excluded = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	}
	sc := r.Scenario
	for _, s := range sc.Shapes() {
		t.Shapes[s]++
	}
	for _, k := range sc.Keys {
		if k.Pattern == Compliant {
			t.Routes[k.Route]++
		}
	}
	for k, v := range r.CompliantBy {
		t.CompliantBy[k] += v
	}
	for k, v := range r.Excluded {
		t.Excluded[k] += v
	}
	t.OverForgotten += r.OverForgotten
	t.Scenarios++
	t.Took += took
	t.Series += r.Series
	t.Windows += r.Windows
	if r.Worst.worse(t.Worst) {
		t.Worst = r.Worst
	}
	for p, e := range r.WorstBy {
		if e.worse(t.WorstBy[p]) {
			t.WorstBy[p] = e
		}
		if e.Excess > 0 {
			t.ViolatedBy[p]++
		}
	}
	fault := sc.Fault.Kind.String()
	if sc.Fault.Kind != NoFault {
		fault += "/" + sc.Fallback.String()
	}
	fault = sc.Mode.String() + " " + fault
	if r.WorstSingle.worse(t.WorstFault[fault]) {
		t.WorstFault[fault] = r.WorstSingle
	}
	t.Compliant += r.Compliant
	t.Refused += r.Refused
	if r.Refused > 0 {
		t.RefusedSeeds = append(t.RefusedSeeds, sc.Seed)
	}
	t.NotConforming += len(r.NotConforming)
	t.LedgerChecked += r.LedgerChecked
	t.LedgerUnknown += r.LedgerUnknown
	kinds := map[string]bool{}
	for _, v := range r.Violations {
		t.Kinds[v.Kind]++
		kinds[v.Kind] = true
	}
	if kinds["ledger"] {
		t.LedgerSeeds = append(t.LedgerSeeds, sc.Seed)
	}
	if r.Failed() {
		t.Failed++
		var ks []string
		for k := range kinds {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		t.Failures = append(t.Failures, fmt.Sprintf("seed %d (%s): %s; first: %v", sc.Seed, strings.Join(sc.Shapes(), " "), strings.Join(ks, ", "), r.Violations[0]))
	}
}

// String is the long run's report.
func (t *Tally) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fleetcheck: %d scenarios in %v, %d failed\n", t.Scenarios, t.Took.Round(time.Second), t.Failed)
	fmt.Fprintf(&b, "  windows checked: %d, over %d (key, limit) series\n", t.Windows, t.Series)
	fmt.Fprintf(&b, "  largest excess over the bound: %v\n", t.Worst)
	fmt.Fprintf(&b, "  refusals of compliant traffic: %d of %d decisions, in %d scenarios %v\n", t.Refused, t.Compliant, len(t.RefusedSeeds), t.RefusedSeeds)
	fmt.Fprintf(&b, "  compliant streams the driver delivered late enough to stop conforming (checked up to there): %d\n", t.NotConforming)
	b.WriteString("  scenarios drawing on each mode, fault/fallback, shape and change of the fleet:\n")
	for _, k := range slices.Sorted(maps.Keys(t.Shapes)) {
		fmt.Fprintf(&b, "    %-28s %d\n", k, t.Shapes[k])
	}
	excluded := 0
	for k, v := range t.Excluded {
		if !strings.HasPrefix(k, "bound: ") {
			excluded += v
		}
	}
	fmt.Fprintf(&b, "  compliant streams by route (streams, decisions checked): ")
	for i, k := range slices.Sorted(maps.Keys(t.Routes)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d, %d", k, t.Routes[k], t.CompliantBy[k])
	}
	fmt.Fprintf(&b, "\n  compliant decisions left out: %d of %d", excluded, excluded+t.Compliant)
	for _, k := range slices.Sorted(maps.Keys(t.Excluded)) {
		if !strings.HasPrefix(k, "bound: ") {
			fmt.Fprintf(&b, "; %s: %d", k, t.Excluded[k])
		}
	}
	fmt.Fprintf(&b, "\n  the bound: %d admissions left out of its windows (made degraded under FailOpen, by definition); %d churning keys over it after forgotten evictions, reported apart",
		t.Excluded["bound: admitted degraded under FailOpen (by definition)"], t.OverForgotten)
	b.WriteString("\n")
	fmt.Fprintf(&b, "  Redis's record of spend: %d records checked, %d that today's state cannot tell; wrong in %d scenarios %v\n", t.LedgerChecked, t.LedgerUnknown, len(t.LedgerSeeds), t.LedgerSeeds)
	var kinds []string
	for k, n := range t.Kinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(kinds)
	fmt.Fprintf(&b, "  violations by kind: %s\n", strings.Join(kinds, ", "))
	b.WriteString("  largest excess by shape (scenarios over the bound on a key of that shape):\n")
	for _, shape := range append(patternNames[:], "multi-limit") {
		if e, ok := t.WorstBy[shape]; ok {
			fmt.Fprintf(&b, "    %-12s %3d  %v\n", shape, t.ViolatedBy[shape], e)
		}
	}
	b.WriteString("  largest excess by mode and fault, on keys under one limit:\n")
	var faults []string
	for f := range t.WorstFault {
		faults = append(faults, f)
	}
	slices.Sort(faults)
	for _, f := range faults {
		fmt.Fprintf(&b, "    %-28s %v\n", f, t.WorstFault[f])
	}
	if len(t.Failures) > 0 {
		fmt.Fprintf(&b, "  failed scenarios (replay each with %s):\n", strings.Replace(ReplayCommand(0), "-seed=0", "-seed=N", 1))
		for _, f := range t.Failures {
			b.WriteString("    " + f + "\n")
		}
	}
	return b.String()
}
