package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tuneRows is a measurement as tune makes one: error growing with the
// interval, Redis load falling, and the two reference rows.
func tuneRows() []tuneRow {
	row := func(iv time.Duration, admitted int, calls, cpu float64) tuneRow {
		return tuneRow{label: "async " + iv.String(), interval: iv, admitted: admitted, limit: 10000, worst1s: 1090,
			p50: 200 * time.Nanosecond, p99: 3 * time.Microsecond, evalsPerS: calls / 10, callsPerS: calls, cpu: cpu}
	}
	return []tuneRow{
		row(time.Millisecond, 9996, 17500, 40),
		row(5*time.Millisecond, 9990, 4000, 12),
		row(20*time.Millisecond, 9950, 1000, 4),
		row(100*time.Millisecond, 9800, 200, 1),
		{label: "sync", admitted: 9976, limit: 10000, p99: 180 * time.Microsecond, callsPerS: 8000, evalsPerS: 2000, cpu: 30},
		{label: "local only", admitted: 19990, limit: 10000, p99: 2 * time.Microsecond},
	}
}

func TestRecommend(t *testing.T) {
	rows := tuneRows()
	for _, tc := range []struct {
		name    string
		target  float64
		budget  string
		want    time.Duration
		meeting int
		err     string
	}{
		{"no budget: the longest accurate enough", 1, "", 20 * time.Millisecond, 3, ""},
		{"a tight target", 0.05, "", time.Millisecond, 1, ""},
		{"a command budget", 1, "5000/s", 20 * time.Millisecond, 2, ""},
		{"a CPU budget rules out the short ones", 3, "5%", 100 * time.Millisecond, 2, ""},
		{"the target is out of reach", 0.01, "", 0, 0, "no measured interval keeps the error within ±0.01%: the closest was -0.04% at 1ms"},
		{"the budget is out of reach", 5, "100/s", 0, 0, "no measured interval fits the Redis budget of 100/s: the cheapest cost 200 Redis commands/s at 100ms"},
		{"both, but not together", 0.1, "2000/s", 0, 0, "an error within ±0.1% needs 1ms, 5ms, the Redis budget of 2000/s allows 20ms, 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b redisBudget
			if tc.budget != "" {
				require.NoError(t, b.Set(tc.budget))
			}
			best, meeting, err := recommend(rows, tc.target, b)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, best.interval)
			assert.Len(t, meeting, tc.meeting)
		})
	}
	_, _, err := recommend(rows[4:], 1, redisBudget{})
	assert.ErrorContains(t, err, "no async interval")
}

func TestRedisBudget(t *testing.T) {
	for in, want := range map[string]redisBudget{"2000/s": {perSecond: 2000}, "5%": {cpu: 5}, " 0.5 % ": {cpu: 0.5}} {
		var b redisBudget
		require.NoError(t, b.Set(in), in)
		assert.Equal(t, want, b, in)
	}
	for _, in := range []string{"", "2000", "-1/s", "0%", "lots/s", "Inf%"} {
		var b redisBudget
		assert.ErrorContains(t, b.Set(in), "want commands per second", in)
	}
}

func TestTickLabels(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.25: "0.25", 0.30000000000000004: "0.3", -0.5: "-0.5", 5: "5", 750: "750",
		9999: "9999", 17500: "17.5k", 20000: "20k", 2.5e6: "2.5M", -15000: "-15k"} {
		assert.Equal(t, want, tickLabel(v), "%v", v)
	}
}

// The plot: a title that does not claim over-admission, the exact limit at
// 0 and sync as measured, readable ticks, and p99 latency.
func TestTunePlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tune.svg")
	var b redisBudget
	require.NoError(t, b.Set("5000/s"))
	require.NoError(t, tunePlot(path, tuneRows(), 1, b))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	svg := string(raw)
	assert.NotContains(t, svg, "Over-admission")
	assert.Contains(t, svg, "Admission error")
	assert.Contains(t, svg, "exact limit")
	assert.Contains(t, svg, "sync (measured: -0.24%)")
	assert.NotContains(t, svg, "sync (exact)")
	assert.Contains(t, svg, "Decision latency, p99")
	assert.Contains(t, svg, "local only")
	assert.Contains(t, svg, "target ±1%")
	assert.Contains(t, svg, "budget 5000/s")
	assert.Contains(t, svg, ">10k<", "thousands as k")
	assert.NotRegexp(t, regexp.MustCompile(`>-?\d+\.\d*0<`), svg, "no trailing zeros in a tick label")
}

// With many keys measured, the table adds what each setting cost Redis per
// decision; local only has nothing to add.
func TestTuneTableWithManyKeys(t *testing.T) {
	rows := tuneRows()
	rows[0].manyKeys, rows[0].keysPerS, rows[0].cpuPerDecision, rows[0].cmdsPerDec = true, 20000, 1500*time.Nanosecond, 0.25
	rows[4].manyKeys, rows[4].keysPerS, rows[4].cpuPerDecision, rows[4].cmdsPerDec, rows[4].degraded = true, 15000, 30*time.Microsecond, 4, 0.1
	table := tuneTable(rows)
	assert.Contains(t, table, "| Redis CPU / decision | Redis commands / decision |")
	assert.Contains(t, table, "| 20000 | 1.50 µs | 0.250 | 1750 | 17500 | 40.0% |")
	assert.Contains(t, table, "| 15000 | 30.00 µs (10% degraded) | 4.000 |")
	assert.Regexp(t, `\| local only \|[^\n]*\| - \| - \| - \| 0 \| 0 \| 0\.0% \|`, table)
	assert.NotContains(t, tuneTable(tuneRows()), "per decision", "one key: the table as before")
}
