package fleetcheck

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
)

func TestGenerateIsDeterministic(t *testing.T) {
	for _, seed := range []int64{1, 2, 42, -7, 1 << 40} {
		a, b := Generate(seed), Generate(seed)
		require.Equal(t, a, b, "seed %d", seed)
		assert.Equal(t, seed, a.Seed)
	}
	assert.NotEqual(t, Generate(1).Requests, Generate(2).Requests)
}

// Every shape the checker promises to draw from is drawn, within a few
// hundred seeds, and every scenario is well formed.
func TestGenerateCoversEveryShape(t *testing.T) {
	patterns := map[Pattern]int{}
	faults := map[FaultKind]int{}
	fallbacks := map[hybrid.Fallback]int{}
	modes := map[hybrid.Mode]int{}
	algorithms := map[hybrid.Mode]map[limit.Algorithm]int{hybrid.Async: {}, hybrid.Sync: {}, hybrid.LocalOnly: {}}
	multi, sameAlgorithm, joins, leaves, maxKeys := 0, 0, 0, 0, 0
	for seed := int64(1); seed <= 300; seed++ {
		sc := Generate(seed)
		modes[sc.Mode]++
		faults[sc.Fault.Kind]++
		if sc.Fault.Kind != NoFault {
			fallbacks[sc.Fallback]++
			assert.Less(t, sc.Fault.At, sc.Fault.Heal, "seed %d", seed)
			assert.LessOrEqual(t, sc.Fault.Heal, sc.Duration-600*time.Millisecond, "seed %d: healed before the end", seed)
			assert.NotEqual(t, hybrid.LocalOnly, sc.Mode, "seed %d: no Redis to fault", seed)
		}
		if sc.MaxKeys > 0 {
			maxKeys++
		}
		require.GreaterOrEqual(t, len(sc.Nodes), 1)
		require.LessOrEqual(t, len(sc.Nodes), 8)
		for _, n := range sc.Nodes {
			if n.Join > 0 {
				joins++
			}
			if n.Leave < sc.Duration {
				leaves++
			}
		}
		for _, k := range sc.Keys {
			patterns[k.Pattern]++
			if len(k.Limits) > 1 {
				multi++
				if k.Limits[0].Algorithm == k.Limits[1].Algorithm {
					sameAlgorithm++
				}
			}
			for _, l := range k.Limits {
				require.NoError(t, l.Validate(), "seed %d %s", seed, k.Name)
				require.NoError(t, l.CheckN(k.MaxWeight), "seed %d %s: the heaviest request fits every limit", seed, k.Name)
				algorithms[sc.Mode][l.Algorithm]++
				if sc.Mode == hybrid.Async && l.Algorithm == limit.SlidingWindowLog {
					assert.Equal(t, Unsupported, k.Pattern, "seed %d %s: Async runs the log only to refuse it", seed, k.Name)
				}
			}
		}
		for i, r := range sc.Requests {
			span := sc.Nodes[r.Node]
			switch {
			case i > 0 && sc.Requests[i-1].At > r.At:
				t.Fatalf("seed %d: request %d out of time order", seed, i)
			case r.At < span.Join || r.At >= span.Leave:
				t.Fatalf("seed %d: request %d at %v to node %d, up %v–%v", seed, i, r.At, r.Node, span.Join, span.Leave)
			case r.N < 1 || r.N > sc.Keys[r.Key].MaxWeight:
				t.Fatalf("seed %d: request %d weighs %d, outside 1..%d", seed, i, r.N, sc.Keys[r.Key].MaxWeight)
			}
		}
		decisions := 0
		for _, r := range sc.Requests {
			decisions += len(sc.Keys[r.Key].Limits)
		}
		assert.LessOrEqual(t, float64(decisions), 1.2*decisionBudget*sc.Duration.Seconds(), "seed %d: within the budget", seed)
	}
	for p := range patternNames {
		assert.Positive(t, patterns[Pattern(p)], "pattern %v", Pattern(p))
	}
	for _, k := range []FaultKind{NoFault, Kill, Pause, Slow} {
		assert.Positive(t, faults[k], "fault %v", k)
	}
	for _, f := range []hybrid.Fallback{hybrid.Conservative, hybrid.FailOpen, hybrid.FailClosed} {
		assert.Positive(t, fallbacks[f], "fallback %v", f)
	}
	for _, m := range []hybrid.Mode{hybrid.Async, hybrid.Sync, hybrid.LocalOnly} {
		assert.Positive(t, modes[m], "mode %v", m)
		for _, a := range limit.Algorithms {
			assert.Positive(t, algorithms[m][a], "%v in %v mode", a, m)
		}
	}
	assert.Positive(t, multi, "several limits on one key")
	assert.Positive(t, sameAlgorithm, "several limits of one algorithm on one key")
	assert.Positive(t, joins, "nodes joining")
	assert.Positive(t, leaves, "nodes leaving")
	assert.Positive(t, maxKeys, "a small MaxKeys")
}

func TestScenarioString(t *testing.T) {
	sc := Generate(4)
	s := sc.String()
	assert.Contains(t, s, "seed 4: ")
	assert.Contains(t, s, sc.Mode.String())
	assert.NotEmpty(t, sc.Shapes())
}
