package grpclimit_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

func TestMain(m *testing.M) {
	redistest.QuietClientLogs()
	goleak.VerifyTestMain(m)
}

const (
	check = "/grpc.health.v1.Health/Check"
	watch = "/grpc.health.v1.Health/Watch"
)

var epoch = time.Unix(1_800_000_000, 0)

// newLimiter returns a limiter configured by cfg, closed when the test ends.
func newLimiter(t testing.TB, cfg hybrid.Config) *hybrid.Limiter {
	t.Helper()
	l, err := hybrid.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Close(ctx)
	})
	return l
}

// compile builds Rules from the YAML of a rules file.
func compile(t testing.TB, yaml string) func() *rules.Rules {
	t.Helper()
	cfg, err := rules.Parse([]byte(yaml))
	require.NoError(t, err)
	r, err := rules.Compile(cfg)
	require.NoError(t, err)
	return rules.Static(r)
}

// serve starts a real gRPC server on a loopback port, serving the health
// service behind cfg's interceptors, and returns a client connected to it;
// both are closed when the test ends. dial adds client options.
func serve(t testing.TB, cfg grpclimit.Config, dial ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	ic, err := grpclimit.New(cfg)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-served
	})
	return healthpb.NewHealthClient(conn)
}

// call makes one Check call with the metadata pairs kv and returns its trailer
// and error.
func call(t testing.TB, c healthpb.HealthClient, kv ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	var tr metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr))
	return tr, err
}

// codesOf makes n Check calls and returns their status codes.
func codesOf(t testing.TB, c healthpb.HealthClient, n int, kv ...string) []codes.Code {
	t.Helper()
	out := make([]codes.Code, n)
	for i := range out {
		_, err := call(t, c, kv...)
		out[i] = status.Code(err)
	}
	return out
}

// recorder is a observe.Observer that keeps every event.
type recorder struct {
	mu       sync.Mutex
	checks   []observe.CheckEvent
	requests []observe.RequestEvent
}

func (r *recorder) ObserveCheck(e observe.CheckEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, e)
}

func (r *recorder) ObserveRequest(e observe.RequestEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, e)
}

// outcomes returns "outcome rule" of every call so far and forgets them.
func (r *recorder) outcomes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, q := range r.requests {
		out = append(out, q.Outcome.String()+" "+q.Rule)
	}
	r.checks, r.requests = nil, nil
	return out
}

// x-ratelimit-limit is the limit as its rule wrote it, not a bucket's burst.
func TestLimitTrailerIsTheRuleAsWritten(t *testing.T) {
	lim := newLimiter(t, hybrid.Config{Clock: clock.NewManual(epoch)})
	c := serve(t, grpclimit.Config{Limiter: lim, Rules: compile(t, `rate_limits:
  default: {requests: 3, window: 60, burst: 2}
`)})
	assert.Equal(t, []codes.Code{codes.OK, codes.OK}, codesOf(t, c, 2))
	tr, err := call(t, c)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Equal(t, []string{"3"}, tr.Get(grpclimit.LimitKey))
	assert.Equal(t, []string{"0"}, tr.Get(grpclimit.RemainingKey))
}

// A unary call over the limit ends with ResourceExhausted, a RetryInfo and
// a QuotaFailure detail, and the pushback and rate-limit trailers.
func TestUnaryLimited(t *testing.T) {
	obs := &recorder{}
	lim := newLimiter(t, hybrid.Config{Clock: clock.NewManual(epoch)})
	c := serve(t, grpclimit.Config{Limiter: lim, Observer: obs, Rules: compile(t, `rate_limits:
  endpoints:
    /grpc.health.v1.Health/Check: {requests: 2, window: 60}
`)})
	assert.Equal(t, []codes.Code{codes.OK, codes.OK}, codesOf(t, c, 2))
	tr, err := call(t, c)
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
	assert.Equal(t, `grpclimit: rate limit "endpoint:/grpc.health.v1.Health/Check" exceeded; retry after 30s`, st.Message())
	require.Len(t, st.Details(), 2)
	retry, ok := st.Details()[0].(*errdetails.RetryInfo)
	require.True(t, ok, "%T", st.Details()[0])
	assert.Equal(t, 30*time.Second, retry.GetRetryDelay().AsDuration(), "2 per minute, both spent: the next in 30 s")
	quota, ok := st.Details()[1].(*errdetails.QuotaFailure)
	require.True(t, ok, "%T", st.Details()[1])
	require.Len(t, quota.GetViolations(), 1)
	assert.Equal(t, "endpoint:/grpc.health.v1.Health/Check", quota.GetViolations()[0].GetSubject())
	assert.Equal(t, "limit 2/1m0s burst 2 token_bucket", quota.GetViolations()[0].GetDescription())
	assert.Equal(t, []string{"30000"}, tr.Get(grpclimit.PushbackKey))
	assert.Equal(t, []string{"30"}, tr.Get(grpclimit.RetryAfterKey))
	assert.Equal(t, []string{"2"}, tr.Get(grpclimit.LimitKey))
	assert.Equal(t, []string{"0"}, tr.Get(grpclimit.RemainingKey))
	assert.Equal(t, []string{"passed ", "passed ", "limited endpoint:/grpc.health.v1.Health/Check"}, obs.outcomes())
}

// The rules see a call's full method as its path: an exact method rule
// beats its service's subtree rule, and methods no endpoint rule matches
// fall to the default rule, each with budgets of their own.
func TestMethodsMatchEndpointRules(t *testing.T) {
	obs := &recorder{}
	lim := newLimiter(t, hybrid.Config{Clock: clock.NewManual(epoch)})
	c := serve(t, grpclimit.Config{Limiter: lim, Observer: obs, Rules: compile(t, `rate_limits:
  endpoints:
    /grpc.health.v1.Health/Check: {requests: 1, window: 60}
    /grpc.health.v1.Health/*: {requests: 3, window: 60}
  default: {requests: 100, window: 60}
`)})
	assert.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted}, codesOf(t, c, 2))
	opened := 0
	for range 4 {
		if openWatch(t, c) == nil {
			opened++
		}
	}
	assert.Equal(t, 3, opened, "Watch falls to the service's subtree rule: 3 per minute")
	assert.Equal(t, []string{
		"passed ", "limited endpoint:/grpc.health.v1.Health/Check",
		"passed ", "passed ", "passed ", "limited endpoint:/grpc.health.v1.Health/*",
	}, obs.outcomes())
}

// openWatch opens a Watch stream and returns the error of its first Recv.
func openWatch(t testing.TB, c healthpb.HealthClient, kv ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "a stream opens at once; its refusal comes with the first Recv")
	resp, err := s.Recv()
	if err == nil {
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	}
	return err
}

// A stream is checked once, when it opens: refused, its first Recv returns
// ResourceExhausted with the retry information.
func TestStreamLimited(t *testing.T) {
	lim := newLimiter(t, hybrid.Config{Clock: clock.NewManual(epoch)})
	var costs []any
	var mu sync.Mutex
	c := serve(t, grpclimit.Config{Limiter: lim, Rules: compile(t, `rate_limits:
  endpoints:
    /grpc.health.v1.Health/Watch: {requests: 1, window: 10}
`), Cost: func(_ context.Context, method string, req any) int64 {
		mu.Lock()
		defer mu.Unlock()
		costs = append(costs, method, req == nil)
		return 1
	}})
	require.NoError(t, openWatch(t, c))
	err := openWatch(t, c)
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
	require.NotEmpty(t, st.Details())
	assert.Equal(t, 10*time.Second, st.Details()[0].(*errdetails.RetryInfo).GetRetryDelay().AsDuration())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []any{watch, true, watch, true}, costs, "a stream's cost has no request message")
}

// A metadata value keys the client: each API key has its own budget, and a
// call without one falls back to the peer's address.
func TestKeyedByMetadata(t *testing.T) {
	obs := &recorder{}
	lim := newLimiter(t, hybrid.Config{Clock: clock.NewManual(epoch)})
	var clients []string
	var mu sync.Mutex
	c := serve(t, grpclimit.Config{
		Limiter: lim,
		Rules: compile(t, `rate_limits:
  default: {requests: 1, window: 60}
`),
		Client: httpkey.First(httpkey.APIKey(httpkey.APIKeyConfig{Header: "x-api-key"}), httpkey.IP(httpkey.IPResolver{})),
		OnDenied: func(ctx context.Context, d grpclimit.Denial) error {
			mu.Lock()
			clients = append(clients, d.Client+" "+d.Check.Key)
			mu.Unlock()
			return grpclimit.DefaultOnDenied(ctx, d)
		},
		Observer: obs,
	})
	assert.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted}, codesOf(t, c, 2, "x-api-key", "alpha"))
	assert.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted}, codesOf(t, c, 2, "x-api-key", "beta"))
	assert.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted}, codesOf(t, c, 2))
	_, err := call(t, c, "x-api-key", strings.Repeat("k", 300))
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "a malformed key is the client's fault: %v", err)
	assert.Equal(t, "grpclimit: the call's client key is malformed", status.Convert(err).Message())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"key:alpha default|key:alpha", "key:beta default|key:beta", "ip:127.0.0.1 default|ip:127.0.0.1"}, clients)
}

// A banned address, read from x-forwarded-for behind a trusted proxy, ends
// with PermissionDenied and no retry information; a client under the
// penalty's block with ResourceExhausted and the block's length.
func TestBanAndPenalty(t *testing.T) {
	obs := &recorder{}
	lim := newLimiter(t, hybrid.Config{Clock: clock.NewManual(epoch)})
	proxy, err := httpkey.ParseTrustedProxies("127.0.0.1/32")
	require.NoError(t, err)
	c := serve(t, grpclimit.Config{Limiter: lim, Observer: obs,
		IP: httpkey.IPResolver{TrustedProxies: proxy, Header: httpkey.XForwardedForOnly},
		Rules: compile(t, `rate_limits:
  default: {requests: 1, window: 60}
  ban: [192.0.2.0/24]
  penalty: {strikes: 2, within: 60, base: 10, max: 3600}
`)})
	tr, err := call(t, c, "x-forwarded-for", "192.0.2.7")
	st := status.Convert(err)
	assert.Equal(t, codes.PermissionDenied, st.Code())
	assert.Empty(t, st.Details(), "a ban does not end")
	assert.Empty(t, tr.Get(grpclimit.PushbackKey))

	from := []string{"x-forwarded-for", "198.51.100.1"}
	assert.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}, codesOf(t, c, 3, from...))
	tr, err = call(t, c, from...)
	st = status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	assert.Equal(t, "grpclimit: too many calls were refused; this client is blocked for 10s", st.Message())
	require.Len(t, st.Details(), 2)
	assert.Equal(t, 10*time.Second, st.Details()[0].(*errdetails.RetryInfo).GetRetryDelay().AsDuration())
	assert.Equal(t, "penalty", st.Details()[1].(*errdetails.QuotaFailure).GetViolations()[0].GetSubject())
	assert.Equal(t, []string{"10000"}, tr.Get(grpclimit.PushbackKey))
	assert.Empty(t, tr.Get(grpclimit.LimitKey), "a block is not a limit's state")
	assert.Equal(t, []codes.Code{codes.OK}, codesOf(t, c, 1, "x-forwarded-for", "198.51.100.2"), "another client is not blocked")
	assert.Equal(t, []string{"banned ban", "passed ", "limited default", "limited default", "banned penalty", "passed "}, obs.outcomes())
}

// gRPC's own client retry obeys the pushback: a client whose retry policy
// lists RESOURCE_EXHAUSTED waits as long as the server says and is then
// admitted, with no application code.
func TestClientRetryObeysPushback(t *testing.T) {
	obs := &recorder{}
	lim := newLimiter(t, hybrid.Config{}) // the real clock: the client waits real time
	c := serve(t, grpclimit.Config{Limiter: lim, Observer: obs, Rules: compile(t, `rate_limits:
  default: {requests: 5, window: 1, burst: 1}
`)}, grpc.WithDefaultServiceConfig(`{"methodConfig": [{
  "name": [{"service": "grpc.health.v1.Health"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "10s", "maxBackoff": "10s", "backoffMultiplier": 1,
                  "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}
}]}`))
	start := time.Now()
	for range 2 {
		_, err := call(t, c)
		require.NoError(t, err, "the second call is retried after the pushback, not after the 10 s backoff")
	}
	// 5 per second, burst 1: the second call waits 200 ms. The 10 s
	// backoff would outlast the call's deadline.
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	out := obs.outcomes()
	assert.Equal(t, "passed ", out[0])
	assert.Equal(t, "limited default", out[1])
	assert.Equal(t, "passed ", out[len(out)-1])
}

// Two servers on one Redis in Sync mode share one budget.
func TestSharedAcrossServers(t *testing.T) {
	srv := redistest.Start(t)
	yaml := compile(t, `rate_limits:
  endpoints:
    /grpc.health.v1.Health/Check: {requests: 3, window: 3600}
`)
	var cs []healthpb.HealthClient
	for range 2 {
		lim := newLimiter(t, hybrid.Config{Redis: srv.Client(t), Mode: hybrid.Sync, Prefix: "grpc:", RedisTimeout: 5 * time.Second}) // slow is not down, on a loaded machine
		cs = append(cs, serve(t, grpclimit.Config{Limiter: lim, Rules: yaml}))
	}
	got := []codes.Code{}
	for i := range 5 {
		_, err := call(t, cs[i%2])
		got = append(got, status.Code(err))
	}
	assert.Equal(t, []codes.Code{codes.OK, codes.OK, codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}, got)
}

// While a FailClosed limiter is degraded, calls end with Unavailable and
// the time until the breaker probes Redis again.
func TestFailClosed(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t, func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
		o.MaxRetries = -1
	})
	lim := newLimiter(t, hybrid.Config{Redis: client, Fallback: hybrid.FailClosed, SyncInterval: 10 * time.Millisecond, BreakerOpenFor: 2 * time.Second})
	c := serve(t, grpclimit.Config{Limiter: lim, Rules: compile(t, `rate_limits:
  default: {requests: 100, window: 3600}
`)})
	_, err := call(t, c)
	require.NoError(t, err)
	srv.Kill()
	require.Eventually(t, lim.Degraded, 10*time.Second, 5*time.Millisecond, "the breaker opens")
	tr, err := call(t, c)
	st := status.Convert(err)
	require.Equal(t, codes.Unavailable, st.Code(), "%v", err)
	require.Len(t, st.Details(), 1)
	delay := st.Details()[0].(*errdetails.RetryInfo).GetRetryDelay().AsDuration()
	assert.True(t, delay > 0 && delay <= 2*time.Second, "retry when the breaker probes: %v", delay)
	ms, err := strconv.Atoi(tr.Get(grpclimit.PushbackKey)[0])
	require.NoError(t, err)
	assert.Equal(t, (delay+time.Millisecond-1)/time.Millisecond, time.Duration(ms))
}

// OnDenied decides the error; OnError answers what could not be checked.
func TestOnDeniedAndOnError(t *testing.T) {
	lim := newLimiter(t, hybrid.Config{Clock: clock.NewManual(epoch)})
	var seen []grpclimit.Denial
	c := serve(t, grpclimit.Config{
		Limiter: lim,
		Rules: compile(t, `rate_limits:
  default: {requests: 1, window: 60}
`),
		Cost: func(ctx context.Context, _ string, _ any) int64 {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("cost"); len(v) > 0 {
				n, _ := strconv.ParseInt(v[0], 10, 64)
				return n
			}
			return 1
		},
		OnDenied: func(_ context.Context, d grpclimit.Denial) error {
			seen = append(seen, d)
			return status.Errorf(codes.Aborted, "slow down, %s", d.Rule)
		},
		OnError: func(_ context.Context, method string, err error) error {
			return status.Errorf(codes.FailedPrecondition, "%s: %v", method, err)
		},
	})
	assert.Equal(t, []codes.Code{codes.OK, codes.Aborted}, codesOf(t, c, 2))
	require.Len(t, seen, 1)
	assert.Equal(t, check, seen[0].FullMethod)
	assert.Equal(t, codes.ResourceExhausted, seen[0].Code, "the default code, which OnDenied replaced")
	assert.Equal(t, "default|ip:127.0.0.1", seen[0].Check.Key)
	assert.False(t, seen[0].Decision.Allowed)

	_, err := call(t, c, "cost", "-1")
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Equal(t, check+": grpclimit: negative call cost -1", status.Convert(err).Message())
	_, err = call(t, c, "cost", "2")
	assert.Contains(t, status.Convert(err).Message(), "exceeds the limit's capacity", "a cost above the capacity is refused, not denied")
}

// The default OnError answers Internal without echoing the cause.
func TestDefaultOnError(t *testing.T) {
	lim := newLimiter(t, hybrid.Config{Clock: clock.NewManual(epoch)})
	c := serve(t, grpclimit.Config{Limiter: lim, Rules: compile(t, `rate_limits:
  default: {requests: 1, window: 60}
`), Cost: func(context.Context, string, any) int64 { return 5 }, Logger: slog.New(slog.DiscardHandler)})
	_, err := call(t, c)
	st := status.Convert(err)
	assert.Equal(t, codes.Internal, st.Code())
	assert.Equal(t, "grpclimit: the call could not be rate limited", st.Message())
}

// Disabled rules and global shadow mode let every call through.
func TestDisabledAndShadow(t *testing.T) {
	obs := &recorder{}
	lim := newLimiter(t, hybrid.Config{Clock: clock.NewManual(epoch)})
	c := serve(t, grpclimit.Config{Limiter: lim, Observer: obs, Rules: compile(t, `rate_limits:
  shadow: true
  default: {requests: 1, window: 60}
`)})
	assert.Equal(t, []codes.Code{codes.OK, codes.OK}, codesOf(t, c, 2))
	assert.Equal(t, []string{"passed ", "shadow_limited default"}, obs.outcomes())
	off := serve(t, grpclimit.Config{Limiter: lim, Rules: compile(t, `rate_limits:
  enabled: false
  default: {requests: 1, window: 60}
`)})
	assert.Equal(t, []codes.Code{codes.OK, codes.OK, codes.OK}, codesOf(t, off, 3))
}

// New names every mistake in its Config.
func TestNewRefusesBadConfig(t *testing.T) {
	_, err := grpclimit.New(grpclimit.Config{IP: httpkey.IPResolver{IPv6Prefix: 200}, PenaltyClients: -1})
	require.Error(t, err)
	for _, want := range []string{"Config.Limiter is nil", "Config.Rules is nil", "IPv6Prefix 200", "PenaltyClients -1"} {
		assert.ErrorContains(t, err, want)
	}
}
