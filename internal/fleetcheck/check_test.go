package fleetcheck

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
)

// The checks on records made by hand: each promise is seen broken when it
// is, and kept when it is.

// handScenario is an Async fleet of two nodes for one second, with the keys
// given.
func handScenario(keys ...Key) *Scenario {
	return &Scenario{Seed: 99, Mode: hybrid.Async, Interval: 10 * time.Millisecond, Duration: time.Second,
		Nodes: []Span{{0, time.Second}, {0, time.Second}}, Keys: keys, RTT: 10 * time.Millisecond, FleetSize: 2}
}

// admits records count decisions of weight n on key 0, limit 0, node 0,
// spread over [from, to).
func admits(count int, n int64, from, to time.Duration, allowed bool, src hybrid.Source) []Decision {
	out := make([]Decision, count)
	for i := range out {
		out[i] = Decision{At: from + (to-from)*time.Duration(i)/time.Duration(count), N: n, Allowed: allowed, Source: src}
	}
	return out
}

func kinds(r *Result) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Kind)
	}
	return out
}

func TestCheckBound(t *testing.T) {
	tb := limit.PerSecond(100).WithBurst(10)
	sc := handScenario(Key{Name: "k", Limits: []limit.Limit{tb}, Pattern: Steady, MaxWeight: 1})
	// Two nodes, 10 ms: one interval may see 10 + 1 + 100·0.021/2 + 10/2
	// + 10·2/65536 (rounding) = 17.0503.
	bound := Bound(sc.Params(0, 0), 10*time.Millisecond)
	require.InDelta(t, 17.05+20.0/65536, bound, 1e-9)

	rec := &Record{Scenario: sc, Decisions: admits(17, 1, 500*time.Millisecond, 510*time.Millisecond, true, hybrid.Local)}
	res := Check(rec)
	assert.Empty(t, res.Violations)
	assert.Equal(t, 1, res.Series)
	assert.Positive(t, res.Windows)
	assert.InDelta(t, 17-bound, res.Worst.Excess, 1e-9)
	assert.Equal(t, res.Worst, res.WorstBy["steady"])
	assert.Equal(t, res.Worst, res.WorstSingle)

	rec.Decisions = admits(18, 1, 500*time.Millisecond, 510*time.Millisecond, true, hybrid.Local)
	res = Check(rec)
	assert.Equal(t, []string{"bound"}, kinds(res))
	assert.InDelta(t, 18-bound, res.Worst.Excess, 1e-9)
	assert.Equal(t, 10*time.Millisecond, res.Worst.W)
	assert.Contains(t, res.Summary(), ReplayCommand(99))

	// Under FailOpen, what was admitted degraded is admitted by definition.
	sc.Fault, sc.Fallback = Fault{Kind: Pause, At: 400 * time.Millisecond, Heal: 600 * time.Millisecond}, hybrid.FailOpen
	rec.Decisions = append(admits(17, 1, 500*time.Millisecond, 510*time.Millisecond, true, hybrid.Local),
		admits(50, 1, 500*time.Millisecond, 510*time.Millisecond, true, hybrid.Degraded)...)
	assert.Empty(t, Check(rec).Violations)
	sc.Fallback = hybrid.Conservative
	assert.Equal(t, []string{"bound"}, kinds(Check(rec)), "Conservative has no such excuse")
}

// A run whose rounds ran further apart than the interval and the
// allowance (a busy machine) is held to the bound for the staleness it had.
func TestCheckMeasuredStaleness(t *testing.T) {
	tb := limit.PerSecond(100).WithBurst(10)
	sc := handScenario(Key{Name: "k", Limits: []limit.Limit{tb}, Pattern: Steady, MaxWeight: 1})
	rec := &Record{Scenario: sc, Nodes: []NodeRecord{{MaxGap: 15 * time.Millisecond}, {MaxGap: 5 * time.Millisecond}}}
	assert.Equal(t, sc.RTT, rec.Params(0, 0).RTT, "within the interval and the allowance: the allowance")
	rec.Nodes[1].MaxGap = 61 * time.Millisecond
	assert.Equal(t, 50*time.Millisecond, rec.Params(0, 0).RTT, "61 ms between rounds, less 1.1 intervals")
	rec.Decisions = admits(18, 1, 500*time.Millisecond, 510*time.Millisecond, true, hybrid.Local)
	res := Check(rec)
	assert.Empty(t, res.Violations, "18 in an interval is within 10 + 1 + 100·0.061/2 + 10/2")
	assert.Equal(t, 50*time.Millisecond, res.RTT)
}

func TestCheckCompliance(t *testing.T) {
	tb := limit.PerSecond(100).WithBurst(10)
	sc := handScenario(Key{Name: "c", Limits: []limit.Limit{tb}, Pattern: Compliant, Fraction: 0.5, MaxWeight: 1})
	rec := &Record{Scenario: sc, Start: epoch, Decisions: admits(40, 1, 0, time.Second, true, hybrid.Local)} // 40/s, under 50/s
	res := Check(rec)
	assert.Empty(t, res.Violations)
	assert.Equal(t, 40, res.Compliant)

	rec.Decisions[7].Allowed = false
	res = Check(rec)
	assert.Equal(t, []string{"refusal"}, kinds(res))
	assert.Equal(t, 1, res.Refused)

	// FailClosed refuses while degraded, by definition; Conservative may not.
	rec.Decisions[7].Source = hybrid.Degraded
	sc.Fault, sc.Fallback = Fault{Kind: Kill, At: 100 * time.Millisecond, Heal: 300 * time.Millisecond}, hybrid.FailClosed
	assert.NotContains(t, kinds(Check(rec)), "refusal")
	sc.Fallback = hybrid.Conservative
	assert.Contains(t, kinds(Check(rec)), "refusal")

	// A stream delivered faster than the fraction is held to it only as far
	// as it conformed, and says so.
	sc.Fault, sc.Fallback = Fault{}, hybrid.Conservative
	rec.Decisions = append(admits(10, 1, 0, time.Millisecond, true, hybrid.Local), admits(1, 1, time.Millisecond, 2*time.Millisecond, false, hybrid.Local)...)
	res = Check(rec)
	assert.Empty(t, res.Violations, "f·B = 5: only the first five at once conform, and they were admitted")
	require.Len(t, res.NotConforming, 1)
	assert.Contains(t, res.NotConforming[0], "request 5 of 11")
	assert.Equal(t, 5, res.Compliant)
}

func TestCheckLedger(t *testing.T) {
	tb := limit.PerSecond(100).WithBurst(10)
	sc := handScenario(Key{Name: "k", Limits: []limit.Limit{tb}, Pattern: Steady, MaxWeight: 1})
	decisions := admits(10, 1, 0, time.Second, true, hybrid.Local)
	record := ledgerOf("k", tb)
	require.NotEqual(t, record, ledgerOf("k", tb.WithBurst(20)), "every limit of a key has a record of its own")
	rec := func(held int64, lost uint64, closeErr error) *Record {
		l := newLedger(nil, hybrid.Async)
		l.seen[record] = held
		return &Record{Scenario: sc, Decisions: decisions, ledger: l, Nodes: []NodeRecord{{LostSpend: lost, CloseErr: closeErr}, {}}}
	}
	cases := []struct {
		name     string
		held     int64
		lost     uint64
		closeErr error
		want     []string
	}{
		{"all held", 10, 0, nil, nil},
		{"one short, counted lost", 9, 1, nil, nil},
		{"one short, not counted", 9, 0, nil, []string{"ledger"}},
		{"one short from a node that could not report at Close", 9, 0, errors.New("flush failed"), []string{"close"}},
		{"counted twice", 11, 0, nil, []string{"ledger"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := Check(rec(c.held, c.lost, c.closeErr))
			assert.Equal(t, c.want, kinds(res), "%v", res.Violations)
			assert.Equal(t, 1, res.LedgerChecked)
		})
	}
	// After Redis lost its data, only what was admitted after is asked for.
	sc.Fault = Fault{Kind: Kill, At: 500 * time.Millisecond, Heal: 700 * time.Millisecond}
	r := rec(5, 0, nil)
	r.FaultAt = 500 * time.Millisecond
	assert.Empty(t, Check(r).Violations)
	r = rec(3, 0, nil)
	r.FaultAt = 500 * time.Millisecond
	assert.Equal(t, []string{"ledger"}, kinds(Check(r)))
	// A window algorithm's ledger is read as a bucket's.
	win := limit.PerSecond(10).WithBurst(0).WithAlgorithm(limit.FixedWindow)
	wsc := handScenario(Key{Name: "k", Limits: []limit.Limit{win}, Pattern: Steady, MaxWeight: 1})
	wl := newLedger(nil, hybrid.Async)
	wl.seen[ledgerOf("k", win)] = 10
	res := Check(&Record{Scenario: wsc, Decisions: admits(10, 1, 0, time.Second, true, hybrid.Local), ledger: wl, Nodes: []NodeRecord{{}, {}}})
	assert.Empty(t, res.Violations)
	assert.Equal(t, 1, res.LedgerChecked)
	// Sync decisions keep no ledger: unknown, not passed.
	sc.Mode, sc.Fault = hybrid.Sync, Fault{}
	r = rec(0, 0, nil)
	r.ledger.mode = hybrid.Sync
	res = Check(r)
	assert.Empty(t, res.Violations)
	assert.Equal(t, 1, res.LedgerUnknown)
}

func TestCheckErrorsAndUnsupported(t *testing.T) {
	log := limit.PerSecond(10).WithBurst(0).WithAlgorithm(limit.SlidingWindowLog)
	sc := handScenario(Key{Name: "log", Limits: []limit.Limit{log}, Pattern: Unsupported, MaxWeight: 1},
		Key{Name: "k", Limits: []limit.Limit{limit.PerSecond(10)}, Pattern: Steady, MaxWeight: 1})
	unsupported := fmt.Errorf("wrapped: %w", hybrid.ErrUnsupported)
	rec := &Record{Scenario: sc, Decisions: []Decision{{Key: 0, Err: unsupported}, {Key: 1, Allowed: true, N: 1}}}
	assert.Empty(t, Check(rec).Violations)

	rec.Decisions = append(rec.Decisions, Decision{Key: 0, Allowed: true, N: 1}, Decision{Key: 1, Err: errors.New("boom")})
	res := Check(rec)
	assert.Equal(t, []string{"error", "error"}, kinds(res))
	assert.True(t, strings.Contains(res.Violations[1].What, "boom"), res.Violations[1].What)

	rec.Decisions = nil
	rec.Recovered = errors.New("node 1 stuck")
	rec.Nodes = []NodeRecord{{StartErr: errors.New("no redis")}, {CloseErr: errors.New("3 keys of spend not reported")}}
	assert.Equal(t, []string{"start", "close", "recovery"}, kinds(Check(rec)))
}
