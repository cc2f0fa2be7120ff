package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/sync/round"
)

const (
	dashboardPath = "../docs/grafana-dashboard.json"
	docsPath      = "../docs/metrics.md"
)

// family is what a query may say of one registered metric family.
type family struct {
	typ    dto.MetricType
	labels map[string]map[string]bool // label name → the values seen
}

// registered gathers every metric the package can export, after one
// observation of each kind, from a Recorder and a collector of an Async
// limiter's Stats.
func registered(t *testing.T) map[string]family {
	t.Helper()
	r, reg := newRecorder(t, Options{})
	lim := limit.PerSecond(10)
	for src := range 3 {
		for _, allowed := range []bool{true, false} {
			for _, shadow := range []bool{true, false} {
				r.ObserveCheck(observe.CheckEvent{Rule: "global", Decision: decision(hybrid.Source(src), allowed, 0, lim), Shadow: shadow, Latency: time.Microsecond})
			}
		}
	}
	for o := range numOutcomes {
		r.ObserveRequest(observe.RequestEvent{Outcome: observe.Outcome(o), Rule: "global", Client: "client", Latency: time.Microsecond})
	}
	r.ObserveRound(round.Info{Keys: 10, Duration: time.Millisecond, Nodes: 3})
	r.ObserveRound(round.Info{Keys: 10, Duration: time.Millisecond, Err: errors.New("boom")})
	r.ObserveRound(round.Info{Err: breaker.ErrOpen})
	require.NoError(t, reg.Register(newLimiterCollector(func() hybrid.Stats {
		return hybrid.Stats{Mode: hybrid.Async, Breaker: breaker.Open, Keys: 1}
	}, "")))

	out := map[string]family{}
	for name, mf := range families(t, reg) {
		f := family{typ: mf.GetType(), labels: map[string]map[string]bool{}}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if f.labels[lp.GetName()] == nil {
					f.labels[lp.GetName()] = map[string]bool{}
				}
				f.labels[lp.GetName()][lp.GetValue()] = true
			}
		}
		out[name] = f
	}
	return out
}

// targetLabels are added by Prometheus at scrape time: a query may use them.
var targetLabels = []string{"instance", "job"}

var (
	reGrouping = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	reRange    = regexp.MustCompile(`\[[^\]]*\]`)
	reSelector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?`)
	reMatcher  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*$`)
	promqlWord = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"}
)

// checkExpr reports every metric name, label and label value expr uses that
// the package does not register, and returns the families expr names.
func checkExpr(expr string, fams map[string]family) (used []string, errs []error) {
	var grouping []string
	for _, m := range reGrouping.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				grouping = append(grouping, l)
			}
		}
	}
	rest := reGrouping.ReplaceAllString(expr, " ")
	rest = reRange.ReplaceAllString(rest, " ")
	available := slices.Clone(targetLabels)
	for _, m := range reSelector.FindAllStringSubmatchIndex(rest, -1) {
		name := rest[m[2]:m[3]]
		if m[2] > 0 && strings.ContainsAny(rest[m[2]-1:m[2]], "0123456789.") {
			continue // the exponent of a number: 5e-3
		}
		if after := strings.TrimLeft(rest[m[1]:], " \t\n"); strings.HasPrefix(after, "(") || slices.Contains(promqlWord, strings.ToLower(name)) {
			continue // a function or an aggregation, or a keyword
		}
		base := name
		f, ok := fams[name]
		if !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, found := strings.CutSuffix(name, suffix); found && fams[b].typ == dto.MetricType_HISTOGRAM {
					base, f, ok = b, fams[b], true
					break
				}
			}
		}
		if !ok {
			errs = append(errs, fmt.Errorf("%q: the package registers no metric %s", expr, name))
			continue
		}
		used = append(used, base)
		labels := map[string]map[string]bool{}
		for k, v := range f.labels {
			labels[k] = v
		}
		if strings.HasSuffix(name, "_bucket") && base != name {
			labels["le"] = nil
		}
		for l := range labels {
			available = append(available, l)
		}
		if m[4] < 0 {
			continue
		}
		matchers := strings.Trim(rest[m[4]:m[5]], "{}")
		for ms := range strings.SplitSeq(matchers, ",") {
			if strings.TrimSpace(ms) == "" {
				continue
			}
			mm := reMatcher.FindStringSubmatch(ms)
			if mm == nil {
				errs = append(errs, fmt.Errorf("%q: cannot read matcher %q", expr, ms))
				continue
			}
			label, op, val := mm[1], mm[2], mm[3]
			values, known := labels[label]
			switch {
			case slices.Contains(targetLabels, label):
			case !known:
				errs = append(errs, fmt.Errorf("%q: %s has no label %s", expr, name, label))
			case op == "=" && values != nil && !strings.Contains(val, "$") && !values[val]:
				errs = append(errs, fmt.Errorf("%q: %s{%s} never takes the value %q", expr, name, label, val))
			}
		}
	}
	for _, l := range grouping {
		if !slices.Contains(available, l) {
			errs = append(errs, fmt.Errorf("%q: groups by %s, a label none of its metrics has", expr, l))
		}
	}
	if len(used) == 0 {
		errs = append(errs, fmt.Errorf("%q: names no metric", expr))
	}
	return used, errs
}

func TestCheckExprCatchesMistakes(t *testing.T) {
	fams := registered(t)
	for _, expr := range []string{
		`sum(rate(rate_limit_exceded_total[5m]))`,                                   // a typo
		`rate(rate_limit_requests_total{result="limit"}[5m])`,                       // a value never exported
		`rate(rate_limit_requests_total{rule="global"}[5m])`,                        // a label it does not have
		`sum by (client_id) (rate(rate_limit_exceeded_total[1h]))`,                  // grouping by a label it does not have
		`histogram_quantile(0.99, rate(rate_limit_requests_total_bucket[5m]))`,      // not a histogram
		`histogram_quantile(0.99, rate(rate_limit_check_duration_seconds_sum[5m]))`, // fine...
	} {
		_, errs := checkExpr(expr, fams)
		if strings.Contains(expr, "_sum[") {
			assert.Empty(t, errs, expr)
			continue
		}
		assert.NotEmpty(t, errs, expr)
	}
	used, errs := checkExpr(`histogram_quantile(0.99, sum by (le, source) (rate(rate_limit_check_duration_seconds_bucket{source=~"local|remote"}[5m]))) > 5e-3`, fams)
	assert.Empty(t, errs)
	assert.Equal(t, []string{"rate_limit_check_duration_seconds"}, used)
}

// dashboard is the part of Grafana's dashboard model the test reads.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"` // a string, or an object for a query variable
			Definition string          `json:"definition"`
			Datasource *datasource     `json:"datasource"`
			IncludeAll bool            `json:"includeAll"`
			AllValue   string          `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *datasource              `json:"datasource"`
	GridPos    struct{ X, Y, W, H int } `json:"gridPos"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// TestDashboard reads docs/grafana-dashboard.json: proper JSON, a Prometheus
// data source variable every panel uses, job and instance variables every
// query filters on, a sound layout, the common rate-limit queries, and every
// query naming only metrics, labels and values this package registers.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	require.NoError(t, dec.Decode(&d), "the dashboard is JSON")
	assert.False(t, dec.More(), "one JSON value")
	assert.NotEmpty(t, d.Title)
	assert.NotEmpty(t, d.UID)
	assert.GreaterOrEqual(t, d.SchemaVersion, 36, "a recent schema")

	fams := registered(t)
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		switch v.Name {
		case "datasource":
			vars[v.Name] = v.Type == "datasource" && string(v.Query) == `"prometheus"`
		case "job", "instance":
			// Fleets sharing one Prometheus stay apart: every query filters
			// on both, and "All" matches everything.
			ok := v.Type == "query" && v.IncludeAll && v.AllValue == ".*" && v.Datasource != nil && v.Datasource.UID == "${datasource}"
			m := regexp.MustCompile(`^label_values\((.+), ` + v.Name + `\)$`).FindStringSubmatch(v.Definition)
			if assert.NotNil(t, m, "variable %s: %s", v.Name, v.Definition) {
				_, errs := checkExpr(m[1], fams)
				assert.Empty(t, errs, "variable %s queries a metric the package registers", v.Name)
			}
			vars[v.Name] = ok
		}
	}
	for _, name := range []string{"datasource", "job", "instance"} {
		assert.True(t, vars[name], "a proper %s variable", name)
	}

	var exprs []string
	ids := map[int]bool{}
	var boxes []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			assert.False(t, ids[p.ID], "panel id %d used twice", p.ID)
			ids[p.ID] = true
			g := p.GridPos
			assert.True(t, g.W > 0 && g.H > 0 && g.X >= 0 && g.Y >= 0 && g.X+g.W <= 24, "panel %q: gridPos %+v", p.Title, g)
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			boxes = append(boxes, p)
			assert.NotEmpty(t, p.Title, "panel %d has a title", p.ID)
			if assert.NotNil(t, p.Datasource, p.Title) {
				assert.Equal(t, datasource{"prometheus", "${datasource}"}, *p.Datasource, p.Title)
			}
			require.NotEmpty(t, p.Targets, "panel %q has queries", p.Title)
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				assert.NotEmpty(t, tg.RefID)
				assert.False(t, refs[tg.RefID], "panel %q: refId %s twice", p.Title, tg.RefID)
				refs[tg.RefID] = true
				if assert.NotNil(t, tg.Datasource, p.Title) {
					assert.Equal(t, "${datasource}", tg.Datasource.UID, p.Title)
				}
				require.NotEmpty(t, strings.TrimSpace(tg.Expr), "panel %q: an empty query", p.Title)
				exprs = append(exprs, tg.Expr)
			}
		}
	}
	walk(d.Panels)
	for i, a := range boxes {
		for _, b := range boxes[i+1:] {
			ga, gb := a.GridPos, b.GridPos
			overlap := ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H
			assert.False(t, overlap, "panels %q and %q overlap", a.Title, b.Title)
		}
	}

	onDashboard := map[string]bool{}
	for _, expr := range exprs {
		for _, sel := range reSelector.FindAllStringSubmatch(reGrouping.ReplaceAllString(expr, " "), -1) {
			if strings.HasPrefix(sel[1], "rate_limit_") {
				assert.Contains(t, sel[2], `job=~"$job"`, "%s in %q", sel[1], expr)
				assert.Contains(t, sel[2], `instance=~"$instance"`, "%s in %q", sel[1], expr)
			}
		}
		used, errs := checkExpr(expr, fams)
		for _, err := range errs {
			t.Error(err)
		}
		for _, u := range used {
			onDashboard[u] = true
		}
	}

	// The common rate-limit dashboard queries (docs/metrics.md), with this
	// package's names and the dashboard's filters.
	const f = `{job=~"$job", instance=~"$instance"}`
	for _, want := range []string{
		`sum(rate(rate_limit_exceeded_total` + f + `[5m])) / sum(rate(rate_limit_requests_total` + f + `[5m])) * 100`,
		`topk(10, sum by (client_id) (rate(rate_limit_client_exceeded_total` + f + `[1h])))`,
		`histogram_quantile(0.99, sum by (le) (rate(rate_limit_check_duration_seconds_bucket` + f + `[5m])))`,
	} {
		assert.Contains(t, exprs, want)
	}
	// And a panel for every metric, but two that need none.
	for name := range fams {
		if name == "rate_limit_mode" || name == "rate_limit_redis_successes_total" {
			continue
		}
		assert.True(t, onDashboard[name], "no panel shows %s", name)
	}
}

// TestDocs reads docs/metrics.md: every metric the package registers is
// listed, every rate_limit_ name it mentions exists (but the commonly used
// names it maps from, in the mapping table), and its PromQL (queries and alert rules)
// passes the dashboard's check.
func TestDocs(t *testing.T) {
	raw, err := os.ReadFile(docsPath)
	require.NoError(t, err)
	doc := string(raw)
	fams := registered(t)
	for name := range fams {
		assert.True(t, strings.Contains(doc, "`"+name+"`"), "docs/metrics.md does not list %s", name)
	}
	common := []string{"rate_limit_latency_ms", "rate_limit_latency_bucket"}
	for _, name := range regexp.MustCompile(`\brate_limit_[a-z_]+`).FindAllString(doc, -1) {
		if slices.Contains(common, name) {
			continue
		}
		_, errs := checkExpr(name, fams)
		assert.Empty(t, errs, "docs/metrics.md names %s", name)
	}

	blocks := regexp.MustCompile("(?s)```(promql|yaml)\n(.*?)```").FindAllStringSubmatch(doc, -1)
	var exprs []string
	for _, b := range blocks {
		switch b[1] {
		case "promql":
			for l := range strings.SplitSeq(b[2], "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					exprs = append(exprs, l)
				}
			}
		case "yaml":
			var rules struct {
				Groups []struct {
					Rules []struct {
						Alert string `yaml:"alert"`
						Expr  string `yaml:"expr"`
					} `yaml:"rules"`
				} `yaml:"groups"`
			}
			require.NoError(t, yaml.Unmarshal([]byte(b[2]), &rules), "the alert rules are YAML")
			for _, g := range rules.Groups {
				for _, r := range g.Rules {
					assert.NotEmpty(t, r.Alert)
					exprs = append(exprs, r.Expr)
				}
			}
		}
	}
	require.GreaterOrEqual(t, len(exprs), 10, "the dashboard queries and the alerts")
	for _, expr := range exprs {
		_, errs := checkExpr(expr, fams)
		for _, err := range errs {
			t.Error(err)
		}
	}
}

// TestRegisteredCoversEveryMetric keeps registered honest: it must see
// every family the package can export, or the dashboard check would pass
// over a metric it never saw.
func TestRegisteredCoversEveryMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(reg, Options{})
	require.NoError(t, err)
	described := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		r.Describe(ch)
		newLimiterCollector(func() hybrid.Stats { return hybrid.Stats{} }, "").Describe(ch)
		close(ch)
	}()
	for d := range ch {
		name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())
		require.NotNil(t, name, d.String())
		described[name[1]] = true
	}
	fams := registered(t)
	assert.Len(t, fams, len(described))
	for name := range described {
		assert.Contains(t, fams, name)
	}
}
