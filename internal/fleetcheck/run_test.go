package fleetcheck

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
)

// evenly returns requests of weight n for key at rate per second, for d,
// each to the next of nodes.
func evenly(key, nodes int, rate float64, d time.Duration, n int64) []Request {
	var out []Request
	step := time.Duration(float64(time.Second) / rate)
	for i, at := 0, step/2; at < d; i, at = i+1, at+step {
		out = append(out, Request{At: at, Node: i % nodes, Key: key, N: n})
	}
	return out
}

// sortRequests puts requests in time order, as Generate does.
func sortRequests(sc *Scenario) {
	slices.SortStableFunc(sc.Requests, func(a, b Request) int { return cmp.Compare(a.At, b.At) })
}

// A real run of one LocalOnly node, no Redis: within the bound (which is
// exact there), compliant traffic all admitted; and the same record held to
// half the limit is caught over it.
func TestRunLocalOnly(t *testing.T) {
	tb := limit.PerSecond(200).WithBurst(20)
	fw := limit.Per(50, 200*time.Millisecond).WithBurst(0).WithAlgorithm(limit.FixedWindow)
	sc := &Scenario{Seed: 7, Mode: hybrid.LocalOnly, Duration: time.Second, Nodes: []Span{{0, time.Second}},
		Keys: []Key{
			{Name: "over", Limits: []limit.Limit{tb}, Pattern: Steady, MaxWeight: 1},
			{Name: "windows", Limits: []limit.Limit{fw}, Pattern: Steady, MaxWeight: 1},
			{Name: "under", Limits: []limit.Limit{tb}, Pattern: Compliant, Fraction: 0.5, MaxWeight: 1},
		}}
	sc.Requests = append(append(evenly(0, 1, 600, time.Second, 1), evenly(1, 1, 600, time.Second, 1)...), evenly(2, 1, 60, time.Second, 1)...)
	sortRequests(sc)
	rec := Run(t, sc)
	res := Check(rec)
	assert.Empty(t, res.Violations, res.Summary())
	assert.Equal(t, 3, res.Series)
	assert.Positive(t, res.Windows)
	assert.Positive(t, res.Compliant)
	assert.Zero(t, res.LedgerChecked+res.LedgerUnknown, "no Redis, no ledger")
	// One node alone is exact, so driven at three times the limit some
	// window comes within a few requests (the driver's timing) of the
	// bound: held at the limit, not under it.
	assert.GreaterOrEqual(t, res.Worst.Excess, -0.05*res.Worst.Bound, "the node was held at its limit, not starved")
	t.Log(res.Summary())

	// The same record, held to half the token bucket, breaks the bound.
	half := *sc
	half.Keys = []Key{{Name: "over", Limits: []limit.Limit{limit.PerSecond(100).WithBurst(10)}, Pattern: Steady, MaxWeight: 1}, sc.Keys[1], sc.Keys[2]}
	rec.Scenario = &half
	assert.Contains(t, kinds(Check(rec)), "bound")
}

// A real Async fleet of two nodes on a private Redis, weight-1 traffic
// spread evenly, no fault: the friendly shape the accuracy tests hold to
// the bound, which every check must pass.
func TestRunAsync(t *testing.T) {
	tb := limit.PerSecond(300).WithBurst(30)
	sc := &Scenario{Seed: 8, Mode: hybrid.Async, Interval: 10 * time.Millisecond, Duration: 1500 * time.Millisecond,
		Nodes: []Span{{0, 1500 * time.Millisecond}, {0, 1500 * time.Millisecond}}, RTT: 10 * time.Millisecond,
		Keys: []Key{
			{Name: "over", Limits: []limit.Limit{tb}, Pattern: Steady, MaxWeight: 1},
			{Name: "under", Limits: []limit.Limit{tb}, Pattern: Compliant, Fraction: 0.3, MaxWeight: 1},
		}}
	sc.Requests = append(evenly(0, 2, 600, sc.Duration, 1), evenly(1, 2, 50, sc.Duration, 1)...)
	sortRequests(sc)
	rec := Run(t, sc)
	res := Check(rec)
	t.Log(res.Summary())
	assert.Empty(t, res.Violations)
	assert.Equal(t, 2, res.LedgerChecked, "Redis holds what was admitted on each key")
	assert.Positive(t, res.Compliant)
	require.NoError(t, rec.Recovered)
	for _, n := range rec.Nodes {
		assert.NoError(t, n.CloseErr)
		assert.Positive(t, n.Rounds)
	}
}
