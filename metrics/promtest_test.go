package metrics

// Thin adapters over prometheus/testutil, so the tests read with a string
// for the expected exposition and a testing.TB where testutil returns an
// error.

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func toFloat64(_ testing.TB, c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

func collectAndCompare(c prometheus.Collector, expected string, names ...string) error {
	return testutil.CollectAndCompare(c, strings.NewReader(expected), names...)
}

func gatherAndCompare(g prometheus.Gatherer, expected string, names ...string) error {
	return testutil.GatherAndCompare(g, strings.NewReader(expected), names...)
}

func collectAndCount(_ testing.TB, c prometheus.Collector, names ...string) int {
	return testutil.CollectAndCount(c, names...)
}

func gatherAndCount(t testing.TB, g prometheus.Gatherer, names ...string) int {
	t.Helper()
	n, err := testutil.GatherAndCount(g, names...)
	if err != nil {
		t.Fatalf("gathering %v: %v", names, err)
	}
	return n
}

// families gathers g by family name.
func families(t testing.TB, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value is the value of the series of name with the given label pairs
// (name, value, name, value...): a counter's or gauge's value, a histogram's
// sample count. ok is false when there is no such series.
func value(t testing.TB, g prometheus.Gatherer, name string, pairs ...string) (v float64, ok bool) {
	t.Helper()
	mf := families(t, g)[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.Metric {
		if !hasLabels(m, pairs) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// hasLabels reports whether m carries every label pair (name, value, ...).
func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
