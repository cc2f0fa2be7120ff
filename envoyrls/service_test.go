package envoyrls_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/envoyrls/config"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/metrics"
)

const (
	okCode   = rlsv3.RateLimitResponse_OK
	overCode = rlsv3.RateLimitResponse_OVER_LIMIT
)

// req builds a request of descriptors, each written "k=v,k2=v2".
func req(domain string, hits uint32, descs ...string) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descs {
		pd := &commonv3.RateLimitDescriptor{}
		for _, e := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(e, "=")
			pd.Entries = append(pd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		r.Descriptors = append(r.Descriptors, pd)
	}
	return r
}

func codes_(resp *rlsv3.RateLimitResponse) []rlsv3.RateLimitResponse_Code {
	var cs []rlsv3.RateLimitResponse_Code
	for _, s := range resp.GetStatuses() {
		cs = append(cs, s.GetCode())
	}
	return cs
}

const twoRules = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
`

func TestHeadersName(t *testing.T) {
	ctx := context.Background()
	r := startRig(t, nil, hybrid.Config{}, envoyrls.Config{Rules: static(t, twoRules), Headers: envoyrls.DefaultHeaders})
	resp, err := r.client.ShouldRateLimit(ctx, req("d", 0, "a=1", "b=1"))
	require.NoError(t, err)
	headers := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		headers[h.GetKey()] = h.GetValue()
	}
	// The descriptor closest to its limit: a, with 0 left of 1 per hour.
	assert.Equal(t, "1", headers["RateLimit-Limit"])
	assert.Equal(t, "0", headers["RateLimit-Remaining"])
	reset := resp.GetStatuses()[0].GetDurationUntilReset().GetSeconds()
	assert.Equal(t, reset, mustAtoi(t, headers["RateLimit-Reset"]))
	assert.LessOrEqual(t, reset, int64(3600))

	_, err = envoyrls.New(envoyrls.Config{Limiter: r.lim, Rules: static(t, twoRules), Headers: envoyrls.Headers{Limit: "X"}})
	assert.ErrorContains(t, err, "envoyrls: Config.Headers needs all three names")
}

func mustAtoi(t *testing.T, s string) int64 {
	var n int64
	for _, c := range s {
		require.True(t, c >= '0' && c <= '9', s)
		n = n*10 + int64(c-'0')
	}
	return n
}

func TestGlobalShadowAndQuotaModes(t *testing.T) {
	ctx := context.Background()
	shadow := startRig(t, nil, hybrid.Config{}, envoyrls.Config{Rules: static(t, twoRules), ShadowMode: true})
	for range 2 {
		_, err := shadow.client.ShouldRateLimit(ctx, req("d", 0, "a=1"))
		require.NoError(t, err)
	}
	resp, err := shadow.client.ShouldRateLimit(ctx, req("d", 0, "a=1"))
	require.NoError(t, err)
	assert.Equal(t, okCode, resp.GetOverallCode(), "shadow mode never answers OVER_LIMIT overall")
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{overCode}, codes_(resp), "but says which descriptor is over")

	quota := startRig(t, nil, hybrid.Config{}, envoyrls.Config{Rules: static(t, twoRules), QuotaMode: true})
	for range 2 {
		resp, err = quota.client.ShouldRateLimit(ctx, req("d", 0, "a=1"))
		require.NoError(t, err)
	}
	assert.Equal(t, okCode, resp.GetOverallCode())
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{okCode}, codes_(resp))
	assert.Nil(t, resp.GetStatuses()[0].GetDurationUntilReset())
	assert.EqualValues(t, 1, resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
}

// This project's algorithms, on a manual clock: a token bucket's burst,
// refilled as time passes, and denials that spend nothing.
func TestAlgorithms(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	r := startRig(t, nil, hybrid.Config{Clock: clk}, envoyrls.Config{Rules: static(t, `
domain: d
descriptors:
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 3}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window_counter}
`)})
	call := func(hits uint32, d string) *rlsv3.RateLimitResponse_DescriptorStatus {
		resp, err := r.client.ShouldRateLimit(ctx, req("d", hits, d))
		require.NoError(t, err)
		return resp.GetStatuses()[0]
	}
	for want := uint32(2); ; want-- {
		st := call(1, "bucket=x")
		require.Equal(t, okCode, st.GetCode())
		assert.Equal(t, want, st.GetLimitRemaining())
		if want == 0 {
			break
		}
	}
	st := call(1, "bucket=x")
	assert.Equal(t, overCode, st.GetCode())
	assert.Equal(t, 100*time.Millisecond, st.GetDurationUntilReset().AsDuration(), "one token back in 100 ms")
	assert.Equal(t, overCode, call(4, "bucket=y").GetCode(), "heavier than the burst: never admitted")
	assert.Equal(t, uint32(2), call(1, "bucket=y").GetLimitRemaining(), "and spent nothing")
	clk.Advance(100 * time.Millisecond)
	assert.Equal(t, okCode, call(1, "bucket=x").GetCode(), "refilled")

	assert.Equal(t, okCode, call(2, "sliding=s").GetCode())
	assert.Equal(t, overCode, call(1, "sliding=s").GetCode())
	clk.Advance(time.Minute)
	assert.Equal(t, overCode, call(1, "sliding=s").GetCode(), "the last minute still holds the previous window's weight")
	clk.Advance(31 * time.Second)
	assert.Equal(t, okCode, call(1, "sliding=s").GetCode())
}

func TestRefusedRequests(t *testing.T) {
	ctx := context.Background()
	r := startRig(t, nil, hybrid.Config{}, envoyrls.Config{Rules: static(t, twoRules)})
	cases := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		code codes.Code
		msg  string
	}{
		{"empty domain", req("", 0, "a=1"), codes.InvalidArgument, "domain must not be empty"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "d"}, codes.InvalidArgument, "descriptor list must not be empty"},
		{"unknown unit", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "a", Value: "1"}},
			Limit:   &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_UNKNOWN}}}}, codes.InvalidArgument, "unknown unit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.client.ShouldRateLimit(ctx, c.req)
			assert.Equal(t, c.code, status.Code(err), "%v", err)
			assert.ErrorContains(t, err, c.msg)
		})
	}
	// A descriptor without entries matches nothing, as in envoyproxy/ratelimit.
	resp, err := r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{{}}})
	require.NoError(t, err)
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{okCode}, codes_(resp))

	require.NoError(t, r.lim.Close(ctx))
	_, err = r.client.ShouldRateLimit(ctx, req("d", 0, "a=1"))
	assert.Equal(t, codes.Unavailable, status.Code(err))
}

// Descriptor values of any length are counted, each distinct one apart, at
// the memory of a short one: a counter name longer than MaxKeyBytes is
// counted under its digest, and counted in LongKeys.
func TestLongValuesCountApart(t *testing.T) {
	ctx := context.Background()
	r := startRig(t, nil, hybrid.Config{}, envoyrls.Config{Rules: static(t, twoRules), MaxKeyBytes: 64})
	call := func(value string) rlsv3.RateLimitResponse_Code {
		resp, err := r.client.ShouldRateLimit(ctx, req("d", 0, "a="+value))
		require.NoError(t, err)
		return resp.GetOverallCode()
	}
	long1, long2 := strings.Repeat("x", 5000), strings.Repeat("x", 4999)+"y"
	assert.Equal(t, okCode, call(long1))
	assert.Equal(t, overCode, call(long1), "one long value, one count (1 an hour)")
	assert.Equal(t, okCode, call(long2), "another long value, its own count")
	assert.EqualValues(t, 3, r.svc.LongKeys())
	// "d_a_" + value + "_@hour" is 64 bytes with a value of 54: kept as is.
	assert.Equal(t, okCode, call(strings.Repeat("z", 54)))
	assert.EqualValues(t, 3, r.svc.LongKeys(), "a name at the bound is not digested")
	assert.Equal(t, okCode, call(strings.Repeat("z", 55)))
	assert.EqualValues(t, 4, r.svc.LongKeys())

	_, err := envoyrls.New(envoyrls.Config{Limiter: r.lim, Rules: static(t, twoRules), MaxKeyBytes: 31})
	assert.ErrorContains(t, err, "Config.MaxKeyBytes 31", "the error names the field and its value")
}

// Before a configuration loads, every call is answered Unavailable and the
// gRPC health says NOT_SERVING under every name; once one loads (and
// SetServing is called, as the rls command does), both turn.
func TestNoConfigurationYet(t *testing.T) {
	ctx := context.Background()
	var loaded atomic.Pointer[config.Config]
	r := startRig(t, nil, hybrid.Config{}, envoyrls.Config{Rules: loaded.Load})
	_, err := r.client.ShouldRateLimit(ctx, req("d", 0, "a=1"))
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "no rate limit configuration loaded")
	assert.False(t, r.svc.Ready())
	hc := healthpb.NewHealthClient(r.conn)
	check := func() []healthpb.HealthCheckResponse_ServingStatus {
		var out []healthpb.HealthCheckResponse_ServingStatus
		for _, name := range envoyrls.HealthServices {
			st, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
			require.NoError(t, err)
			out = append(out, st.GetStatus())
		}
		return out
	}
	notServing, serving := healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING
	assert.Equal(t, []healthpb.HealthCheckResponse_ServingStatus{notServing, notServing, notServing}, check())
	reg := prometheus.NewRegistry()
	_, err = envoyrls.NewConfigMetrics(reg, "", nil)
	require.NoError(t, err)
	assert.Equal(t, 0.0, value(t, reg, "rate_limit_config_rules"))
	admin, err := envoyrls.AdminHandler(envoyrls.AdminConfig{Limiter: r.lim, Rules: loaded.Load})
	require.NoError(t, err)
	web := httptest.NewServer(admin)
	defer web.Close()
	resp, err := http.Get(web.URL + "/healthcheck")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "no configuration", healthz(t, web.URL)["status"])

	loaded.Store(static(t, twoRules)())
	envoyrls.SetServing(r.health, r.svc.Ready())
	answer, err := r.client.ShouldRateLimit(ctx, req("d", 0, "a=1"))
	require.NoError(t, err)
	assert.Equal(t, okCode, answer.GetOverallCode())
	assert.Equal(t, "ok", healthz(t, web.URL)["status"])
	assert.Equal(t, []healthpb.HealthCheckResponse_ServingStatus{serving, serving, serving}, check())

	r.health.Shutdown()
	envoyrls.SetServing(r.health, true)
	assert.Equal(t, []healthpb.HealthCheckResponse_ServingStatus{notServing, notServing, notServing}, check(), "draining stays NOT_SERVING")
}

func TestNew(t *testing.T) {
	lim, err := hybrid.New(hybrid.Config{})
	require.NoError(t, err)
	defer lim.Close(context.Background())
	_, err = envoyrls.New(envoyrls.Config{Rules: static(t, twoRules)})
	assert.ErrorContains(t, err, "envoyrls: Config.Limiter is nil")
	_, err = envoyrls.New(envoyrls.Config{Limiter: lim})
	assert.ErrorContains(t, err, "envoyrls: Config.Rules is nil")
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg, metrics.Options{})
	require.NoError(t, err)
	rules := static(t, twoRules)
	r := startRig(t, nil, hybrid.Config{}, envoyrls.Config{Rules: rules, Observer: rec})
	for range 3 {
		_, err := r.client.ShouldRateLimit(ctx, req("d", 0, "a=1", "b=2"))
		require.NoError(t, err)
	}
	_, err = r.client.ShouldRateLimit(ctx, req("", 0, "a=1"))
	require.Error(t, err)
	assert.Equal(t, 1.0, value(t, reg, "rate_limit_requests_total", "result", "allowed"))
	assert.Equal(t, 2.0, value(t, reg, "rate_limit_requests_total", "result", "limited"))
	assert.Equal(t, 1.0, value(t, reg, "rate_limit_requests_total", "result", "failed"))
	assert.Equal(t, 2.0, value(t, reg, "rate_limit_exceeded_total", "rule", "d.a"))
	assert.Equal(t, 3.0, value(t, reg, "rate_limit_checks_total", "rule", "d.b", "source", "local", "result", "allowed"))

	cm, err := envoyrls.NewConfigMetrics(reg, "", rules())
	require.NoError(t, err)
	cm.OnError(nil)
	cm.OnChange(rules())
	n, err := testutil.GatherAndCount(reg, "rate_limit_config_reloads_total")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rate_limit_config_rules Rate limit rules in the configuration in force.
# TYPE rate_limit_config_rules gauge
rate_limit_config_rules 2
`), "rate_limit_config_rules"))
}

// value is the value of the series of name whose labels include labels
// (name, value pairs); it fails the test if there is none.
func value(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return math.NaN()
}
