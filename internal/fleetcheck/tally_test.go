package fleetcheck

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
)

func TestTally(t *testing.T) {
	tb := limit.PerSecond(100).WithBurst(10)
	ok := handScenario(Key{Name: "k", Limits: []limit.Limit{tb}, Pattern: Steady, MaxWeight: 1})
	bad := handScenario(Key{Name: "k", Limits: []limit.Limit{tb, tb.WithBurst(5)}, Pattern: Weighted, MaxWeight: 5})
	bad.Seed = 123
	var tl Tally
	tl.Add(Check(&Record{Scenario: ok, Decisions: admits(10, 1, 0, time.Second, true, hybrid.Local)}), time.Second)
	tl.Add(Check(&Record{Scenario: bad, Decisions: admits(200, 1, 0, 10*time.Millisecond, true, hybrid.Local)}), 2*time.Second)
	assert.Equal(t, 2, tl.Scenarios)
	assert.Equal(t, 1, tl.Failed)
	assert.Equal(t, 3*time.Second, tl.Took)
	assert.Equal(t, int64(123), tl.Worst.Seed)
	assert.Equal(t, 1, tl.ViolatedBy["multi-limit"])
	assert.Zero(t, tl.ViolatedBy["steady"])
	assert.Equal(t, 1, tl.Kinds["bound"])
	s := tl.String()
	assert.Contains(t, s, "2 scenarios in 3s, 1 failed")
	assert.Contains(t, s, "seed 123 (async weighted multi-limit): bound")
	assert.Contains(t, s, "-run TestReplay -seed=N -v")
}
