package metrics

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/sync/reports"
	"github.com/hybridlimit/hybridlimit/sync/round"
)

// A Recorder is what the middleware observes through.
var _ observe.Observer = (*Recorder)(nil)

// A Recorder is a reconciler's round hook.
var _ = reports.Config{OnRound: (&Recorder{}).ObserveRound}

func TestMain(m *testing.M) {
	redistest.QuietClientLogs() // go-redis logs every dial the outages fail
	goleak.VerifyTestMain(m)
}

// newRecorder returns a Recorder on a fresh registry.
func newRecorder(t testing.TB, opts Options) (*Recorder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	r, err := New(reg, opts)
	require.NoError(t, err)
	return r, reg
}

// decision is an Allow outcome under lim.
func decision(src hybrid.Source, allowed bool, remaining int64, lim limit.Limit) hybrid.Decision {
	return hybrid.Decision{Result: limit.Result{Limit: lim, Allowed: allowed, Remaining: remaining}, Source: src}
}

// smallBuckets keep histogram expositions short enough to write out.
var smallBuckets = Options{LatencyBuckets: []float64{1e-6, 1e-3}, RoundBuckets: []float64{0.01, 1}}

func TestNewRefusesANilRegisterer(t *testing.T) {
	_, err := New(nil, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nil registerer")
}

func TestNewChecksItsOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		opts Options
		want string // the field the error names
	}{
		"namespace with a dash":    {Options{Namespace: "rate-limit"}, `metrics: Namespace "rate-limit"`},
		"namespace with a digit":   {Options{Namespace: "9lives"}, `metrics: Namespace "9lives"`},
		"latency buckets unsorted": {Options{LatencyBuckets: []float64{1, 0.5}}, "metrics: LatencyBuckets: "},
		"latency buckets repeated": {Options{LatencyBuckets: []float64{1, 1}}, "metrics: LatencyBuckets: "},
		"round bucket NaN":         {Options{RoundBuckets: []float64{math.NaN()}}, "metrics: RoundBuckets: "},
		"near limit above 1":       {Options{NearLimit: 1.5}, "metrics: NearLimit 1.5"},
		"near limit NaN":           {Options{NearLimit: math.NaN()}, "metrics: NearLimit NaN"},
		"negative max rules":       {Options{MaxRules: -1}, "metrics: MaxRules is negative (-1)"},
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			_, err := New(reg, tc.opts)
			require.ErrorContains(t, err, tc.want)
			mfs, err := reg.Gather()
			require.NoError(t, err)
			assert.Empty(t, mfs, "a refused Recorder registers nothing")
		})
	}
}

func TestNewNeverUsesTheGlobalRegistry(t *testing.T) {
	before, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	r, _ := newRecorder(t, Options{})
	r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "global", Client: "c"})
	after, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	assert.Len(t, after, len(before))
	for _, mf := range after {
		assert.NotContains(t, mf.GetName(), DefaultNamespace)
	}
}

func TestNewTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := New(reg, Options{})
	require.NoError(t, err)

	_, err = New(reg, Options{})
	require.Error(t, err, "the same names twice")
	var are prometheus.AlreadyRegisteredError
	assert.True(t, errors.As(err, &are))

	_, err = New(prometheus.WrapRegistererWith(prometheus.Labels{"limiter": "b"}, reg), Options{})
	assert.Error(t, err, "a wrapped registerer adds a label, but the family's label names must agree")

	_, err = New(reg, Options{Namespace: "other"})
	assert.NoError(t, err, "another namespace is another set of names")
}

func TestWrappedRegisterersTellTwoRecordersApart(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a, err := New(prometheus.WrapRegistererWith(prometheus.Labels{"limiter": "a"}, reg), Options{})
	require.NoError(t, err)
	b, err := New(prometheus.WrapRegistererWith(prometheus.Labels{"limiter": "b"}, reg), Options{})
	require.NoError(t, err)
	a.ObserveRequest(observe.RequestEvent{Outcome: observe.Passed})
	b.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "global"})
	b.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "global"})
	v, _ := value(t, reg, "rate_limit_requests_total", "limiter", "a", "result", "allowed")
	assert.Equal(t, 1.0, v)
	v, _ = value(t, reg, "rate_limit_exceeded_total", "limiter", "b", "rule", "global")
	assert.Equal(t, 2.0, v)
}

func TestUnregister(t *testing.T) {
	r, reg := newRecorder(t, Options{})
	r.ObserveRequest(observe.RequestEvent{Outcome: observe.Passed})
	require.NotEmpty(t, families(t, reg))
	assert.True(t, reg.Unregister(r))
	assert.Empty(t, families(t, reg))
}

func TestObserveCheck(t *testing.T) {
	r, reg := newRecorder(t, smallBuckets)
	lim := limit.PerSecond(10) // capacity 10: near the limit below 1 remaining
	for _, ev := range []observe.CheckEvent{
		{Rule: "global", Decision: decision(hybrid.Local, true, 5, lim), Latency: 100 * time.Nanosecond},
		{Rule: "global", Decision: decision(hybrid.Local, true, 0, lim), Latency: 200 * time.Nanosecond}, // near
		{Rule: "global", Decision: decision(hybrid.Local, false, 0, lim), Latency: 300 * time.Nanosecond},
		{Rule: "per_ip", Decision: decision(hybrid.Remote, true, 9, lim), Latency: 100 * time.Microsecond},
		{Rule: "per_ip", Decision: decision(hybrid.Degraded, false, 0, lim), Latency: 2 * time.Millisecond},
		{Rule: "tier:free", Decision: decision(hybrid.Local, false, 0, lim), Shadow: true, Latency: 0},
		{Rule: "tier:free", Decision: decision(hybrid.Local, true, 0, lim), Shadow: true, Latency: -time.Second}, // near; a negative latency counts as 0
	} {
		r.ObserveCheck(ev)
	}
	require.NoError(t, gatherAndCompare(reg, `
		# HELP rate_limit_checks_total Limit checks, by rule, by where the decision was made (local: node memory; remote: Redis; degraded: node memory under the fallback, Redis failing) and by result (allowed, limited, shadow_limited). A request makes one check per rule that applies to it.
		# TYPE rate_limit_checks_total counter
		rate_limit_checks_total{result="allowed",rule="global",source="local"} 2
		rate_limit_checks_total{result="limited",rule="global",source="local"} 1
		rate_limit_checks_total{result="shadow_limited",rule="global",source="local"} 0
		rate_limit_checks_total{result="allowed",rule="per_ip",source="remote"} 1
		rate_limit_checks_total{result="limited",rule="per_ip",source="remote"} 0
		rate_limit_checks_total{result="shadow_limited",rule="per_ip",source="remote"} 0
		rate_limit_checks_total{result="allowed",rule="per_ip",source="degraded"} 0
		rate_limit_checks_total{result="limited",rule="per_ip",source="degraded"} 1
		rate_limit_checks_total{result="shadow_limited",rule="per_ip",source="degraded"} 0
		rate_limit_checks_total{result="allowed",rule="tier:free",source="local"} 1
		rate_limit_checks_total{result="limited",rule="tier:free",source="local"} 0
		rate_limit_checks_total{result="shadow_limited",rule="tier:free",source="local"} 1
		# HELP rate_limit_near_limit_total Admitted checks that left less than 0.1 of the limit's capacity remaining, by rule: clients about to be limited.
		# TYPE rate_limit_near_limit_total counter
		rate_limit_near_limit_total{rule="global"} 1
		rate_limit_near_limit_total{rule="per_ip"} 0
		rate_limit_near_limit_total{rule="tier:free"} 1
		# HELP rate_limit_check_duration_seconds Time spent in the limiter for one check, in seconds, by where the decision was made (local, remote, degraded).
		# TYPE rate_limit_check_duration_seconds histogram
		rate_limit_check_duration_seconds_bucket{source="local",le="1e-06"} 5
		rate_limit_check_duration_seconds_bucket{source="local",le="0.001"} 5
		rate_limit_check_duration_seconds_bucket{source="local",le="+Inf"} 5
		rate_limit_check_duration_seconds_sum{source="local"} 6e-07
		rate_limit_check_duration_seconds_count{source="local"} 5
		rate_limit_check_duration_seconds_bucket{source="remote",le="1e-06"} 0
		rate_limit_check_duration_seconds_bucket{source="remote",le="0.001"} 1
		rate_limit_check_duration_seconds_bucket{source="remote",le="+Inf"} 1
		rate_limit_check_duration_seconds_sum{source="remote"} 0.0001
		rate_limit_check_duration_seconds_count{source="remote"} 1
		rate_limit_check_duration_seconds_bucket{source="degraded",le="1e-06"} 0
		rate_limit_check_duration_seconds_bucket{source="degraded",le="0.001"} 0
		rate_limit_check_duration_seconds_bucket{source="degraded",le="+Inf"} 1
		rate_limit_check_duration_seconds_sum{source="degraded"} 0.002
		rate_limit_check_duration_seconds_count{source="degraded"} 1
	`, "rate_limit_checks_total", "rate_limit_near_limit_total", "rate_limit_check_duration_seconds"))
}

func TestNearLimit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fraction  float64
		lim       limit.Limit
		allowed   bool
		remaining int64
		near      bool
	}{
		{"last token of 10", 0, limit.PerSecond(10), true, 0, true},
		{"one left of 10 is not below a tenth", 0, limit.PerSecond(10), true, 1, false},
		{"burst is the capacity", 0, limit.PerSecond(10).WithBurst(100), true, 9, true},
		{"window: the rate is the capacity", 0, limit.PerSecond(100).WithAlgorithm(limit.FixedWindow), true, 10, false},
		{"half", 0.5, limit.PerSecond(10), true, 4, true},
		{"all of it", 1, limit.PerSecond(10), true, 9, true},
		{"denied is limited, not near", 0, limit.PerSecond(10), false, 0, false},
		{"no limit in the decision", 0, limit.Limit{}, true, 0, false},
		{"off", -1, limit.PerSecond(10), true, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newRecorder(t, Options{NearLimit: tc.fraction})
			r.ObserveCheck(observe.CheckEvent{Rule: "r", Decision: decision(hybrid.Local, tc.allowed, tc.remaining, tc.lim)})
			want := 0.0
			if tc.near {
				want = 1
			}
			assert.Equal(t, want, toFloat64(t, r.nearLimits))
		})
	}
}

func TestObserveRequest(t *testing.T) {
	opts := smallBuckets
	opts.ClientLabel = PlainClientLabel
	r, reg := newRecorder(t, opts)
	for _, ev := range []observe.RequestEvent{
		{Outcome: observe.Passed, Client: "a", Latency: 500 * time.Nanosecond},
		{Outcome: observe.Passed, Client: "b", Latency: 500 * time.Nanosecond},
		{Outcome: observe.Limited, Rule: "global", Client: "a", Latency: 500 * time.Nanosecond},
		{Outcome: observe.Limited, Rule: "per_ip", Client: "a", Latency: 500 * time.Nanosecond},
		{Outcome: observe.Limited, Rule: "per_ip", Client: "b", Latency: 500 * time.Nanosecond},
		{Outcome: observe.Banned, Rule: "ban", Client: "c", Latency: 2 * time.Millisecond},
		{Outcome: observe.Unavailable, Rule: "global", Client: "a", Latency: 500 * time.Nanosecond},
		{Outcome: observe.ShadowLimited, Rule: "tier:free", Client: "a", Latency: 500 * time.Nanosecond},
		{Outcome: observe.Failed, Latency: 500 * time.Nanosecond},
	} {
		r.ObserveRequest(ev)
	}
	require.NoError(t, gatherAndCompare(reg, `
		# HELP rate_limit_requests_total Requests the rate-limit middleware handled, by result: allowed, limited (429), shadow_limited (a shadow rule would have limited it; it passed), banned (403), unavailable (limiter degraded and failing closed: 503), failed (could not be checked).
		# TYPE rate_limit_requests_total counter
		rate_limit_requests_total{result="allowed"} 2
		rate_limit_requests_total{result="banned"} 1
		rate_limit_requests_total{result="failed"} 1
		rate_limit_requests_total{result="limited"} 3
		rate_limit_requests_total{result="shadow_limited"} 1
		rate_limit_requests_total{result="unavailable"} 1
		# HELP rate_limit_exceeded_total Requests rejected with 429 because a rule's limit was exceeded, by the rule that rejected them. Equals requests_total{result="limited"} summed over rules.
		# TYPE rate_limit_exceeded_total counter
		rate_limit_exceeded_total{rule="global"} 1
		rate_limit_exceeded_total{rule="per_ip"} 2
		# HELP rate_limit_client_exceeded_total Requests rejected with 429, by client, for the 100 most recently limited clients only: a client's series is deleted when it falls out of them, so sums over client_id undercount exceeded_total.
		# TYPE rate_limit_client_exceeded_total counter
		rate_limit_client_exceeded_total{client_id="a"} 2
		rate_limit_client_exceeded_total{client_id="b"} 1
		# HELP rate_limit_request_duration_seconds Time each request spent in the rate-limit middleware before its handler ran (or it was answered), in seconds.
		# TYPE rate_limit_request_duration_seconds histogram
		rate_limit_request_duration_seconds_bucket{le="1e-06"} 8
		rate_limit_request_duration_seconds_bucket{le="0.001"} 8
		rate_limit_request_duration_seconds_bucket{le="+Inf"} 9
		rate_limit_request_duration_seconds_sum 0.002004
		rate_limit_request_duration_seconds_count 9
	`, "rate_limit_requests_total", "rate_limit_exceeded_total", "rate_limit_client_exceeded_total", "rate_limit_request_duration_seconds"))
}

func TestObserveRound(t *testing.T) {
	r, reg := newRecorder(t, smallBuckets)
	r.ObserveRound(round.Info{Keys: 3, Duration: 2 * time.Millisecond, Nodes: 2})
	r.ObserveRound(round.Info{Keys: 100, Duration: 5 * time.Millisecond, Nodes: 2})
	r.ObserveRound(round.Info{Keys: 100, Duration: 300 * time.Millisecond, Err: breaker.ErrTimeout})
	r.ObserveRound(round.Info{Keys: 1, Duration: 1500 * time.Millisecond, Err: errors.New("dial tcp: connection refused")})
	r.ObserveRound(round.Info{Err: breaker.ErrOpen})
	r.ObserveRound(round.Info{Keys: 7, Err: fmt.Errorf("%w: redis", breaker.ErrOpen)})
	r.ObserveRound(round.Info{Keys: 7, Err: breaker.ErrBusy})
	require.NoError(t, gatherAndCompare(reg, `
		# HELP rate_limit_sync_round_duration_seconds Duration of each sync round (the round trip to Redis, or the time to fail), in seconds, by result: ok, error, refused (the breaker refused the call: Redis was not called).
		# TYPE rate_limit_sync_round_duration_seconds histogram
		rate_limit_sync_round_duration_seconds_bucket{result="ok",le="0.01"} 2
		rate_limit_sync_round_duration_seconds_bucket{result="ok",le="1"} 2
		rate_limit_sync_round_duration_seconds_bucket{result="ok",le="+Inf"} 2
		rate_limit_sync_round_duration_seconds_sum{result="ok"} 0.007
		rate_limit_sync_round_duration_seconds_count{result="ok"} 2
		rate_limit_sync_round_duration_seconds_bucket{result="error",le="0.01"} 0
		rate_limit_sync_round_duration_seconds_bucket{result="error",le="1"} 1
		rate_limit_sync_round_duration_seconds_bucket{result="error",le="+Inf"} 2
		rate_limit_sync_round_duration_seconds_sum{result="error"} 1.8
		rate_limit_sync_round_duration_seconds_count{result="error"} 2
		rate_limit_sync_round_duration_seconds_bucket{result="refused",le="0.01"} 3
		rate_limit_sync_round_duration_seconds_bucket{result="refused",le="1"} 3
		rate_limit_sync_round_duration_seconds_bucket{result="refused",le="+Inf"} 3
		rate_limit_sync_round_duration_seconds_sum{result="refused"} 0
		rate_limit_sync_round_duration_seconds_count{result="refused"} 3
	`, "rate_limit_sync_round_duration_seconds"))
	count, ok := value(t, reg, "rate_limit_sync_round_keys", "result", "ok")
	require.True(t, ok)
	assert.Equal(t, 2.0, count)
	mf := families(t, reg)["rate_limit_sync_round_keys"]
	for _, m := range mf.Metric {
		if hasLabels(m, []string{"result", "ok"}) {
			assert.Equal(t, 103.0, m.Histogram.GetSampleSum())
			for _, b := range m.Histogram.Bucket {
				if b.GetUpperBound() == 4 {
					assert.Equal(t, uint64(1), b.GetCumulativeCount(), "3 keys: in le=4")
				}
				if b.GetUpperBound() == 256 {
					assert.Equal(t, uint64(2), b.GetCumulativeCount(), "100 keys: in le=256")
				}
			}
		}
	}
}

func TestNothingExportedForUnusedHooks(t *testing.T) {
	// The round histograms stay absent, not zero, until rounds are observed:
	// an unwired hook does not look like a fleet that never reconciles.
	_, reg := newRecorder(t, Options{})
	mfs := families(t, reg)
	assert.NotContains(t, mfs, "rate_limit_sync_round_duration_seconds")
	assert.NotContains(t, mfs, "rate_limit_sync_round_keys")
	assert.Contains(t, mfs, "rate_limit_requests_total", "the request outcomes start from an exported zero")
	assert.Equal(t, 6, gatherAndCount(t, reg, "rate_limit_requests_total"))
}

func TestTopClientsAreBounded(t *testing.T) {
	for _, n := range []int{1, 10, DefaultTopClients} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			opts := Options{TopClients: n, ClientLabel: PlainClientLabel}
			if n == DefaultTopClients {
				opts.TopClients = 0 // the default
			}
			r, reg := newRecorder(t, opts)
			for i := range n + 50 {
				r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "global", Client: fmt.Sprintf("client-%d", i)})
				require.LessOrEqual(t, gatherAndCount(t, reg, "rate_limit_client_exceeded_total"), n)
			}
			assert.Equal(t, n, gatherAndCount(t, reg, "rate_limit_client_exceeded_total"))
			v, ok := value(t, reg, "rate_limit_exceeded_total", "rule", "global")
			require.True(t, ok)
			assert.Equal(t, float64(n+50), v, "the total stays exact")
			_, ok = value(t, reg, "rate_limit_client_exceeded_total", "client_id", "client-0")
			assert.False(t, ok, "the first client was evicted")
			_, ok = value(t, reg, "rate_limit_client_exceeded_total", "client_id", fmt.Sprintf("client-%d", n+49))
			assert.True(t, ok, "the last client is held")
		})
	}
}

func TestTopClientsKeepsTheRecentlyLimited(t *testing.T) {
	r, reg := newRecorder(t, Options{TopClients: 3, ClientLabel: PlainClientLabel})
	limited := func(client string) {
		r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "global", Client: client})
	}
	limited("a")
	limited("b")
	limited("c")
	limited("a") // a is the most recent now; b the least
	limited("d") // evicts b
	require.NoError(t, gatherAndCompare(reg, `
		# HELP rate_limit_client_exceeded_total Requests rejected with 429, by client, for the 3 most recently limited clients only: a client's series is deleted when it falls out of them, so sums over client_id undercount exceeded_total.
		# TYPE rate_limit_client_exceeded_total counter
		rate_limit_client_exceeded_total{client_id="a"} 2
		rate_limit_client_exceeded_total{client_id="c"} 1
		rate_limit_client_exceeded_total{client_id="d"} 1
	`, "rate_limit_client_exceeded_total"))
	limited("b") // back, from zero
	v, _ := value(t, reg, "rate_limit_client_exceeded_total", "client_id", "b")
	assert.Equal(t, 1.0, v)
	_, ok := value(t, reg, "rate_limit_client_exceeded_total", "client_id", "c")
	assert.False(t, ok)
}

func TestOnlyLimitedRequestsCountPerClient(t *testing.T) {
	r, reg := newRecorder(t, Options{})
	for _, o := range []observe.Outcome{observe.Passed, observe.Banned, observe.Unavailable, observe.ShadowLimited, observe.Failed} {
		r.ObserveRequest(observe.RequestEvent{Outcome: o, Rule: "global", Client: "a"})
	}
	r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "global"}) // no client key
	assert.Zero(t, gatherAndCount(t, reg, "rate_limit_client_exceeded_total"))
}

func TestClientLabel(t *testing.T) {
	r, reg := newRecorder(t, Options{ClientLabel: func(client string) string {
		if strings.HasPrefix(client, "key:") {
			return "" // secrets stay out
		}
		return strings.TrimPrefix(client, "ip:")
	}})
	for _, c := range []string{"ip:203.0.113.7", "ip:203.0.113.7", "key:s3cret", "ip:\xff\xfe"} {
		r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "per_ip", Client: c})
	}
	require.NoError(t, gatherAndCompare(reg, `
		# HELP rate_limit_client_exceeded_total Requests rejected with 429, by client, for the 100 most recently limited clients only: a client's series is deleted when it falls out of them, so sums over client_id undercount exceeded_total.
		# TYPE rate_limit_client_exceeded_total counter
		rate_limit_client_exceeded_total{client_id="203.0.113.7"} 2
		rate_limit_client_exceeded_total{client_id="�"} 1
	`, "rate_limit_client_exceeded_total"))
}

func TestTopClientsOff(t *testing.T) {
	r, reg := newRecorder(t, Options{TopClients: -1})
	r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "global", Client: "a"})
	assert.NotContains(t, families(t, reg), "rate_limit_client_exceeded_total")
	v, _ := value(t, reg, "rate_limit_exceeded_total", "rule", "global")
	assert.Equal(t, 1.0, v)
}

func TestRulesAreBounded(t *testing.T) {
	r, reg := newRecorder(t, Options{MaxRules: 3})
	lim := limit.PerSecond(10)
	for i := range 10 {
		rule := fmt.Sprintf("rule-%d", i)
		r.ObserveCheck(observe.CheckEvent{Rule: rule, Decision: decision(hybrid.Local, true, 5, lim)})
		r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: rule})
	}
	r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "rule-1"}) // still its own
	require.NoError(t, gatherAndCompare(reg, `
		# HELP rate_limit_exceeded_total Requests rejected with 429 because a rule's limit was exceeded, by the rule that rejected them. Equals requests_total{result="limited"} summed over rules.
		# TYPE rate_limit_exceeded_total counter
		rate_limit_exceeded_total{rule="_other"} 7
		rate_limit_exceeded_total{rule="rule-0"} 1
		rate_limit_exceeded_total{rule="rule-1"} 2
		rate_limit_exceeded_total{rule="rule-2"} 1
	`, "rate_limit_exceeded_total"))
	v, _ := value(t, reg, "rate_limit_checks_total", "rule", OverflowRule, "source", "local", "result", "allowed")
	assert.Equal(t, 7.0, v)
	assert.Equal(t, 4*3, gatherAndCount(t, reg, "rate_limit_checks_total"))
}

func TestOddValuesStayBounded(t *testing.T) {
	r, reg := newRecorder(t, Options{})
	lim := limit.PerSecond(10)
	assert.NotPanics(t, func() {
		r.ObserveCheck(observe.CheckEvent{Rule: "bad\xffrule", Decision: decision(hybrid.Source(42), true, 5, lim)})
		r.ObserveCheck(observe.CheckEvent{Rule: "", Decision: decision(hybrid.Local, true, 5, lim)})
		r.ObserveRequest(observe.RequestEvent{Outcome: observe.Outcome(99), Rule: "x"})
		r.ObserveRequest(observe.RequestEvent{Outcome: observe.Outcome(-1)})
		r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "bad\xffrule"})
	})
	v, _ := value(t, reg, "rate_limit_requests_total", "result", "unknown")
	assert.Equal(t, 2.0, v)
	v, _ = value(t, reg, "rate_limit_checks_total", "rule", "bad\uFFFDrule", "source", "unknown", "result", "allowed")
	assert.Equal(t, 1.0, v)
	v, _ = value(t, reg, "rate_limit_exceeded_total", "rule", "bad\uFFFDrule")
	assert.Equal(t, 1.0, v)
	v, _ = value(t, reg, "rate_limit_check_duration_seconds", "source", "unknown")
	assert.Equal(t, 1.0, v)
}

// TestConcurrentObserveAndScrape: observers on many goroutines, scrapes on
// others; every count adds up and the client series stay bounded throughout.
func TestConcurrentObserveAndScrape(t *testing.T) {
	const (
		observers = 16
		events    = 2000
		clients   = 10
	)
	r, reg := newRecorder(t, Options{TopClients: clients, MaxRules: 8})
	lim := limit.PerSecond(10)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var scrapes sync.WaitGroup
	for range 4 {
		scrapes.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				mfs, err := reg.Gather()
				if !assert.NoError(t, err) {
					return
				}
				for _, mf := range mfs {
					if mf.GetName() == "rate_limit_client_exceeded_total" {
						assert.LessOrEqual(t, len(mf.Metric), clients)
					}
				}
			}
		})
	}
	for g := range observers {
		wg.Go(func() {
			for i := range events {
				rule := fmt.Sprintf("rule-%d", (g+i)%12) // more rules than MaxRules
				src := hybrid.Source(i % 3)
				r.ObserveCheck(observe.CheckEvent{Rule: rule, Decision: decision(src, i%4 != 0, int64(i%10), lim), Latency: time.Duration(i)})
				o := observe.Outcome(i % numOutcomes)
				r.ObserveRequest(observe.RequestEvent{Outcome: o, Rule: rule, Client: fmt.Sprintf("c%d-%d", g, i%50)})
				if i%100 == 0 {
					r.ObserveRound(round.Info{Keys: i, Duration: time.Millisecond})
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	scrapes.Wait()

	total := 0.0
	for _, mf := range families(t, reg)["rate_limit_requests_total"].Metric {
		total += mf.Counter.GetValue()
	}
	assert.Equal(t, float64(observers*events), total)
	checks := 0.0
	for _, mf := range families(t, reg)["rate_limit_checks_total"].Metric {
		checks += mf.Counter.GetValue()
	}
	assert.Equal(t, float64(observers*events), checks)
	limited := 0.0
	rules := map[string]bool{}
	for _, mf := range families(t, reg)["rate_limit_exceeded_total"].Metric {
		limited += mf.Counter.GetValue()
		rules[mf.Label[0].GetValue()] = true
	}
	v, _ := value(t, reg, "rate_limit_requests_total", "result", "limited")
	assert.Equal(t, v, limited)
	assert.Len(t, rules, 9, "8 rules and the overflow")
	assert.Equal(t, clients, gatherAndCount(t, reg, "rate_limit_client_exceeded_total"))
	n, _ := value(t, reg, "rate_limit_check_duration_seconds", "source", "local")
	assert.Equal(t, float64(observers*((events+2)/3)), n, "a third of the checks are local")
}

func TestClientLabelsAreHashedByDefault(t *testing.T) {
	key := []byte("fleet secret")
	r, reg := newRecorder(t, Options{ClientLabelKey: key})
	clients := []string{"ip:203.0.113.7", "key:s3cret-api-key", "user:42", "ip:203.0.113.7|key:s3cret-api-key", "opaque"}
	for _, c := range clients {
		r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "global", Client: c})
	}
	r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "global", Client: "ip:203.0.113.7"})

	scrape := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(scrape, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, scrape.Code)
	require.Contains(t, scrape.Body.String(), "rate_limit_client_exceeded_total{")
	for _, secret := range []string{"203.0.113.7", "s3cret", "user:42", "opaque"} {
		assert.NotContains(t, scrape.Body.String(), secret, "no client key in what Prometheus scrapes")
	}
	for _, tc := range []struct{ client, pattern string }{
		{"ip:203.0.113.7", `^ip:[0-9a-f]{16}$`},
		{"key:s3cret-api-key", `^key:[0-9a-f]{16}$`},
		{"user:42", `^user:[0-9a-f]{16}$`},
		{"ip:203.0.113.7|key:s3cret-api-key", `^ip\+key:[0-9a-f]{16}$`},
		{"opaque", `^[0-9a-f]{16}$`},
	} {
		label := ClientLabelOf(key, tc.client)
		assert.Regexp(t, tc.pattern, label, tc.client)
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(tc.client))
		assert.True(t, strings.HasSuffix(label, hex.EncodeToString(mac.Sum(nil))[:16]), "%s: HMAC-SHA256 under the key, as openssl computes it", tc.client)
		v, ok := value(t, reg, "rate_limit_client_exceeded_total", "client_id", label)
		require.True(t, ok, "%s is counted under %s", tc.client, label)
		if tc.client == "ip:203.0.113.7" {
			assert.Equal(t, 2.0, v)
		}
	}
}

func TestClientLabelKeys(t *testing.T) {
	labelOf := func(opts Options) string {
		r, reg := newRecorder(t, opts)
		r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "global", Client: "ip:203.0.113.7"})
		mfs := families(t, reg)
		return mfs["rate_limit_client_exceeded_total"].GetMetric()[0].GetLabel()[0].GetValue()
	}
	shared := []byte("one key for the fleet")
	assert.Equal(t, labelOf(Options{ClientLabelKey: shared}), labelOf(Options{ClientLabelKey: shared}), "one key: one label on every node")
	assert.NotEqual(t, labelOf(Options{}), labelOf(Options{}), "no key: a random one per Recorder")
	assert.NotEqual(t, ClientLabelOf([]byte("a"), "ip:203.0.113.7"), ClientLabelOf([]byte("b"), "ip:203.0.113.7"))
	long := bytes.Repeat([]byte("k"), 100) // longer than SHA-256's block: hashed first, as HMAC does
	mac := hmac.New(sha256.New, long)
	mac.Write([]byte("ip:1.2.3.4"))
	assert.Equal(t, "ip:"+hex.EncodeToString(mac.Sum(nil))[:16], ClientLabelOf(long, "ip:1.2.3.4"))
	assert.Equal(t, "ip:203.0.113.7", labelOf(Options{ClientLabel: PlainClientLabel}), "plain text on request")
}

func TestAppendKind(t *testing.T) {
	for client, want := range map[string]string{
		"ip:203.0.113.7":                     "ip",
		"ip:2001:db8::/64":                   "ip",
		"keyhash:0123":                       "keyhash",
		"ip:1.2.3.4|user:42|endpoint:GET /x": "ip+user+endpoint",
		`ip:1.2.3.4|key:a\|b:c`:              "ip+key", // an escaped separator stays inside its part
		"":                                   "",
		"noprefix":                           "",
		"Upper:x":                            "",
		":x":                                 "",
		"a:1|b:2|c:3|d:4|e:5|f:6|g:7|h:8|i:9|j:10|k:11|l:12|m:13": "", // too many kinds: none
	} {
		assert.Equal(t, want, string(appendKind(nil, client)), client)
	}
}
