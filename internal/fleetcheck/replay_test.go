package fleetcheck

import (
	"testing"
)

// TestReplay runs the scenario of -seed and checks it, printing what it
// found: the command a failure prints.
func TestReplay(t *testing.T) {
	if *seedFlag == 0 {
		t.Skip("no -seed given: nothing to replay (a failing run prints the command, with its seed)")
	}
	sc := Generate(*seedFlag)
	t.Log(sc)
	rec := Run(t, sc)
	res := Check(rec)
	t.Logf("took %v\n%s", rec.Took, res.Summary())
	for _, n := range rec.Nodes {
		t.Logf("%s: started in %d attempts, lost %d, close err %v, rounds %d (%d failed), slowest round %v, longest gap between rounds %v, driver late by %v",
			n.Name, n.StartAttempts, n.LostSpend, n.CloseErr, n.Rounds, n.RoundErrors, n.MaxRound, n.MaxGap, n.Late)
	}
	for _, l := range rec.Logs {
		t.Log(l)
	}
	if res.Failed() {
		t.Fail()
	}
}
