package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// rlsRun is a running `hybridlimit rls`: its gRPC address, its admin and
// debug base URLs ("none" without one), its output, and how to stop it.
type rlsRun struct {
	grpc, admin, debug string
	out                *lockedBuffer
	stop               func() error // cancels the command and returns what it returned
}

// startRLS runs `hybridlimit rls args...` until the test ends (or stop),
// and waits until it listens.
func startRLS(t *testing.T, args ...string) *rlsRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &rlsRun{out: &lockedBuffer{}}
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"rls"}, args...), r.out) }()
	var once sync.Once
	var result error
	r.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(20 * time.Second):
				result = errors.New("the service did not stop within 20 s")
			}
		})
		return result
	}
	t.Cleanup(func() { _ = r.stop() })
	// The line that says where it listens, in -log-format text or json.
	listening := regexp.MustCompile(`msg="rls: listening" grpc=(\S+) admin=(\S+) debug=(\S+)|"msg":"rls: listening","grpc":"([^"]+)","admin":"([^"]+)","debug":"([^"]+)"`)
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
		}
		m := listening.FindStringSubmatch(r.out.String())
		if m != nil {
			r.grpc, r.admin, r.debug = m[1]+m[4], m[2]+m[5], m[3]+m[6]
		}
		return m != nil
	}, 20*time.Second, 5*time.Millisecond, "the service starts: %s", r.out)
	require.NotEmpty(t, r.grpc, "the service exited: %s", r.out)
	return r
}

func (r *rlsRun) client(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// get returns the status and body of the admin listener's path.
func (r *rlsRun) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return httpGet(t, r.admin+path)
}

// httpGet returns the status and body of url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// healthOf is the gRPC health under every name the service reports on.
func healthOf(t *testing.T, conn *grpc.ClientConn) []healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	var out []healthpb.HealthCheckResponse_ServingStatus
	for _, name := range envoyrls.HealthServices {
		hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		require.NoError(t, err)
		out = append(out, hc.GetStatus())
	}
	return out
}

var (
	serving    = []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_SERVING}
	notServing = []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_NOT_SERVING}
)

// listServices asks the server's reflection service for its services.
func listServices(conn *grpc.ClientConn) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	// io.EOF from Send: the server ended the stream already (reflection
	// off: Unimplemented), and Recv returns its status (grpc.ClientStream).
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

const edgeConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
`

func edgeRequest() *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}}
}

// The command serves RLS over gRPC against a private Redis, with server
// reflection, the gRPC health and its admin listener, and stops cleanly,
// reporting what it spent.
func TestRLSServesAndStops(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(edgeConfig), 0o644))
	r := startRLS(t, "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-config", dir, "-redis", srv.Addr(), "-prefix", "t:")
	assert.Regexp(t, `mode=async rules=1 domains=1 `, r.out.String())
	conn := r.client(t)
	client := rlsv3.NewRateLimitServiceClient(conn)
	var got []rlsv3.RateLimitResponse_Code
	for range 3 {
		resp, err := client.ShouldRateLimit(context.Background(), edgeRequest())
		require.NoError(t, err)
		got = append(got, resp.GetOverallCode())
	}
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}, got)
	assert.Equal(t, serving, healthOf(t, conn))
	services, err := listServices(conn)
	require.NoError(t, err, "server reflection, on by default")
	assert.Subset(t, services, []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"})

	_, body := r.get(t, "/metrics")
	assert.Contains(t, body, `rate_limit_requests_total{result="limited"} 1`)
	assert.Contains(t, body, `rate_limit_config_rules 1`)
	assert.Contains(t, body, `rate_limit_mode{mode="async"} 1`)
	assert.Contains(t, body, "go_goroutines ")
	assert.Contains(t, body, "process_open_fds ")
	assert.Contains(t, body, `rate_limit_keys_evicted_total 0`)
	assert.Contains(t, body, `rate_limit_long_keys_total 0`)
	code, _ := r.get(t, "/rlconfig")
	assert.Equal(t, http.StatusNotFound, code, "the rules are the debug listener's")
	assert.Equal(t, "none", r.debug, "no debug listener unless asked for")
	_, body = r.get(t, "/healthz")
	assert.Contains(t, body, `"status":"ok"`)

	require.NoError(t, r.stop(), "a clean shutdown")
	assert.Contains(t, r.out.String(), "shutting down")
	// Close reported the spend: Redis holds the counts under the prefix.
	keys, err := srv.Do("KEYS", "t:*")
	require.NoError(t, err)
	assert.NotEmpty(t, keys)
}

func TestRLSReflectionOff(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(edgeConfig), 0o644))
	r := startRLS(t, "-grpc", "127.0.0.1:0", "-admin", "", "-config", dir, "-grpc-reflection=false")
	_, err := listServices(r.client(t))
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	assert.Equal(t, "none", r.admin)
}

// A bad configuration at start: by default the service runs, as
// envoyproxy/ratelimit does, answering every call with an error and
// reporting NOT_SERVING (gRPC health and /healthz) until a valid one
// loads; with -config-required it exits.
func TestRLSStartsWithABadConfig(t *testing.T) {
	dir := t.TempDir()
	bad := "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(bad), 0o644))
	err := run(context.Background(), []string{"rls", "-grpc", "127.0.0.1:0", "-admin", "", "-config", dir, "-config-required"}, io.Discard)
	assert.ErrorContains(t, err, `config: edge.yaml: line 4, column 24: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`)
	err = run(context.Background(), []string{"rls", "-config", filepath.Join(dir, "missing")}, io.Discard)
	assert.ErrorContains(t, err, "rls: config: watch", "a directory that does not exist stops it whatever the setting")

	r := startRLS(t, "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-config", dir)
	assert.Contains(t, r.out.String(), `invalid rate limit unit \"fortnight\"`, "the reason is logged")
	assert.Contains(t, r.out.String(), "rules=0 domains=0")
	conn := r.client(t)
	client := rlsv3.NewRateLimitServiceClient(conn)
	_, err = client.ShouldRateLimit(context.Background(), edgeRequest())
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Equal(t, notServing, healthOf(t, conn))
	code, body := r.get(t, "/healthcheck")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, `"status":"no configuration"`)
	_, body = r.get(t, "/metrics")
	assert.Contains(t, body, `rate_limit_config_rules 0`)

	tmp := filepath.Join(dir, ".edge.yaml")
	require.NoError(t, os.WriteFile(tmp, []byte(edgeConfig), 0o644))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "edge.yaml")))
	require.Eventually(t, func() bool {
		_, err := client.ShouldRateLimit(context.Background(), edgeRequest())
		return err == nil
	}, 20*time.Second, 10*time.Millisecond, "the first valid configuration is taken")
	// The health turns SERVING just after the configuration is in force
	// (calls may succeed a moment before probes see it, never the reverse).
	for end := time.Now().Add(5 * time.Second); !slices.Equal(healthOf(t, conn), serving) && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, serving, healthOf(t, conn))
	code, _ = r.get(t, "/healthcheck")
	assert.Equal(t, http.StatusOK, code)
	_, body = r.get(t, "/metrics")
	assert.Contains(t, body, `rate_limit_config_rules 1`)
	assert.Contains(t, body, `rate_limit_config_reloads_total{result="error"} 1`)
	require.NoError(t, r.stop())
}

// Redis unreachable at start: without -fleet-size, under the conservative
// fallback, the service exits (as envoyproxy/ratelimit does without Redis)
// and its error names the flag; with it, the service starts degraded,
// SERVING, and answers from memory.
func TestRLSRedisDownAtStart(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(edgeConfig), 0o644))
	dead := deadAddr(t)
	err := run(context.Background(), []string{"rls", "-grpc", "127.0.0.1:0", "-admin", "", "-config", dir, "-redis", dead, "-redis-timeout", "100ms"}, io.Discard)
	require.ErrorIs(t, err, hybrid.ErrRedisUnavailable)
	assert.ErrorContains(t, err, "-fleet-size (HYBRIDLIMIT_FLEET_SIZE)")
	assert.NotContains(t, err.Error(), "FleetSize", "the flag, not the library's field")

	r := startRLS(t, "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-config", dir, "-redis", dead, "-redis-timeout", "100ms", "-fleet-size", "2")
	conn := r.client(t)
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), edgeRequest())
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.GetOverallCode())
	assert.Equal(t, serving, healthOf(t, conn), "degraded, still answering: SERVING")
	code, body := r.get(t, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"status":"degraded"`)
	require.NoError(t, r.stop())
}

// With -log-format json every line the command writes is a JSON object,
// go-redis's own lines (a failed dial while Redis is down) included.
func TestRLSLogsEveryLineAsJSON(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(edgeConfig), 0o644))
	r := startRLS(t, "-grpc", "127.0.0.1:0", "-admin", "", "-config", dir, "-redis", deadAddr(t), "-redis-timeout", "50ms",
		"-fleet-size", "1", "-log-format", "json")
	require.NoError(t, r.stop())
	lines := strings.Split(strings.TrimSpace(r.out.String()), "\n")
	fromRedis := 0
	for _, line := range lines {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "not a JSON line: %q", line)
		if rec["source"] == "go-redis" {
			fromRedis++
		}
	}
	assert.Positive(t, fromRedis, "go-redis's lines come through slog: %s", r.out)
}

// envoyproxy/ratelimit's environment sets the same settings.
func TestRLSSettingsFromTheirEnvironment(t *testing.T) {
	environ := map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "9081", "HOST": "127.0.0.1", "PORT": "9080",
		"RUNTIME_ROOT": "/srv/rt/current", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_APPDIRECTORY": "config",
		"MERGE_DOMAIN_CONFIG": "true", "REDIS_URL": "mymaster,10.0.0.1:26379", "REDIS_TYPE": "SENTINEL", "REDIS_AUTH": "u:p",
		"REDIS_POOL_SIZE": "20", "REDIS_TIMEOUT": "2s", "CACHE_KEY_PREFIX": "x:", "SHADOW_MODE": "true", "QUOTA_MODE": "false",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-Limit", "NEAR_LIMIT_RATIO": "0.9",
		"LOG_LEVEL": "DEBUG", "LOG_FORMAT": "json", "GRPC_MAX_CONNECTION_AGE": "1h", "HYBRIDLIMIT_MODE": "sync", "HYBRIDLIMIT_FALLBACK": "fail-open",
	}
	lookup := func(k string) (string, bool) { v, ok := environ[k]; return v, ok }
	s, err := parseRLSFlags(nil, io.Discard, lookup)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9081", s.grpcAddr)
	assert.Equal(t, "127.0.0.1:9080", s.adminAddr)
	assert.Equal(t, "/srv/rt/current/ratelimit/config", s.configDir)
	assert.True(t, s.mergeDomains)
	assert.Equal(t, "sentinel", s.redisType)
	assert.Equal(t, 20, s.redisPool)
	assert.Equal(t, 2*time.Second, s.redisTimeout)
	assert.Equal(t, "x:", s.prefix)
	assert.True(t, s.shadowMode)
	assert.True(t, s.headers)
	assert.Equal(t, envoyrls.Headers{Limit: "X-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}, s.headerNames)
	assert.Equal(t, 0.9, s.nearLimitRatio)
	assert.Equal(t, "json", s.logFormat)
	assert.Equal(t, time.Hour, s.maxConnAge)
	assert.Equal(t, hybrid.Sync, s.mode)
	assert.Equal(t, hybrid.FailOpen, s.fallback)
	client, err := s.redisClient()
	require.NoError(t, err)
	_, ok := client.(*redis.Client) // a failover client is a *redis.Client
	assert.True(t, ok)
	_ = client.Close()

	// Flags win over the environment.
	s, err = parseRLSFlags([]string{"-mode", "local", "-redis", ""}, io.Discard, lookup)
	require.NoError(t, err)
	assert.Equal(t, hybrid.LocalOnly, s.mode)
	client, err = s.redisClient()
	require.NoError(t, err)
	assert.Nil(t, client)

	// Their defaults, but the debug listener's: none unless asked for.
	s, err = parseRLSFlags(nil, io.Discard, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:8081", s.grpcAddr)
	assert.Equal(t, "0.0.0.0:8080", s.adminAddr, "probes and scrapers from outside the pod reach it")
	assert.Empty(t, s.debugAddr)
	assert.Equal(t, "/srv/runtime_data/current/config", s.configDir)
	assert.True(t, s.reflection)
	assert.False(t, s.configRequired)
	hc := s.limiterConfig(nil, nil, nil)
	assert.Equal(t, defaultMaxKeys, hc.MaxKeys)
	assert.Equal(t, defaultMaxKeys, hc.MaxPending)
	assert.Equal(t, envoyrls.DefaultMaxKeyBytes, s.maxKeyBytes)

	s, err = parseRLSFlags([]string{"-admin", "127.0.0.1:8080", "-grpc-reflection=false", "-config-required", "-max-keys", "5000", "-max-key-bytes", "64"}, io.Discard,
		func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8080", s.adminAddr)
	assert.False(t, s.reflection)
	assert.True(t, s.configRequired)
	assert.Equal(t, 5000, s.limiterConfig(nil, nil, nil).MaxKeys)
	assert.Equal(t, 64, s.maxKeyBytes)
}

func TestRLSSettingsRefused(t *testing.T) {
	cases := []struct {
		env  map[string]string
		args []string
		msg  string
	}{
		{map[string]string{"SHADOW_MODE": "maybe"}, nil, `SHADOW_MODE="maybe": want true or false`},
		{map[string]string{"REDIS_TIMEOUT": "10"}, nil, `REDIS_TIMEOUT="10": want a duration`},
		{map[string]string{"GRPC_PORT": "x"}, nil, `GRPC_PORT="x": want an integer`},
		{map[string]string{"HYBRIDLIMIT_MODE": "fast"}, nil, `unknown mode "fast"`},
		{nil, []string{"-fallback", "maybe"}, `unknown fallback "maybe"`},
		{nil, []string{"-near-limit-ratio", "2"}, "want a fraction"},
		{nil, []string{"extra"}, "unexpected arguments"},
		{nil, []string{"-max-keys", "0"}, "-max-keys 0: want a positive number"},
		{nil, []string{"-max-key-bytes", "16"}, "-max-key-bytes 16: want at least 32"},
		{map[string]string{"HYBRIDLIMIT_MAX_KEYS": "many"}, nil, `HYBRIDLIMIT_MAX_KEYS="many": want an integer`},
		{map[string]string{"DEBUG_PORT": "pprof"}, nil, `DEBUG_PORT="pprof": want an integer`},
		{nil, []string{"-admin", "127.0.0.1:9000", "-debug", "127.0.0.1:9000"}, "-admin and -debug are both on port 9000 of 127.0.0.1"},
		{map[string]string{"DEBUG_PORT": "8081"}, []string{"-grpc", ":8081"}, "-debug and -grpc are both on port 8081"},
		{nil, []string{"-debug", "6070"}, `-debug "6070": want host:port`},
	}
	for _, c := range cases {
		_, err := parseRLSFlags(c.args, io.Discard, func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		assert.ErrorContains(t, err, c.msg)
	}
	for _, c := range []struct {
		s   rlsSettings
		msg string
	}{
		{rlsSettings{redisURL: "mymaster", redisType: "sentinel"}, "master-name,sentinel1:port"},
		{rlsSettings{redisURL: "a:1", redisType: "ring"}, `-redis-type "ring"`},
		{rlsSettings{redisURL: "a:1", redisType: "single", redisSocket: "udp"}, `-redis-socket-type "udp"`},
		{rlsSettings{redisURL: "a:1", redisType: "single", redisTLS: true, redisTLSCA: "/nonexistent"}, "-redis-tls-cacert"},
	} {
		_, err := c.s.redisClient()
		assert.ErrorContains(t, err, c.msg)
	}
	for _, c := range []struct {
		s   rlsSettings
		msg string
	}{
		{rlsSettings{logLevel: "loud", logFormat: "text"}, "-log-level"},
		{rlsSettings{logLevel: "info", logFormat: "xml"}, "-log-format"},
	} {
		_, err := c.s.logger(io.Discard)
		assert.ErrorContains(t, err, c.msg)
	}
	c, err := (&rlsSettings{redisURL: "a:1,b:2", redisType: "cluster"}).redisClient()
	require.NoError(t, err)
	_, ok := c.(*redis.ClusterClient)
	assert.True(t, ok)
	_ = c.Close()
	assert.True(t, containsCommand("rls"))
}

func containsCommand(name string) bool {
	for _, c := range commands() {
		if c.name == name {
			return true
		}
	}
	return false
}

// The debug listener is asked for by envoyproxy/ratelimit's DEBUG_HOST and
// DEBUG_PORT (either one), on loopback unless told.
func TestRLSDebugListenerFromTheirEnvironment(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, nil, ""},
		{[]string{"DEBUG_PORT", "7070"}, nil, "127.0.0.1:7070"},
		{[]string{"DEBUG_HOST", "0.0.0.0"}, nil, "0.0.0.0:6070"},
		{[]string{"DEBUG_HOST", "10.1.2.3", "DEBUG_PORT", "7070"}, nil, "10.1.2.3:7070"},
		{[]string{"DEBUG_PORT", "7070"}, []string{"-debug", ""}, ""},
		{nil, []string{"-debug", "127.0.0.1:6070"}, "127.0.0.1:6070"},
	} {
		s, err := parseRLSFlags(c.args, io.Discard, env(c.env...))
		require.NoError(t, err, "%v %v", c.env, c.args)
		assert.Equal(t, c.want, s.debugAddr, "%v %v", c.env, c.args)
	}
}

// With envoyproxy/ratelimit's environment, the admin listener serves
// health and metrics on every interface (a kubelet probe and a Prometheus
// scrape from outside the pod reach it) and shows no rule; the debug
// listener, asked for by DEBUG_PORT, is on loopback and serves pprof and
// the rules in force.
func TestRLSAdminOnEveryInterfaceDebugOnLoopback(t *testing.T) {
	for _, k := range []string{"HOST", "DEBUG_HOST"} {
		t.Setenv(k, "")
		require.NoError(t, os.Unsetenv(k))
	}
	t.Setenv("PORT", "0")
	t.Setenv("DEBUG_PORT", "0")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(edgeConfig), 0o644))
	r := startRLS(t, "-grpc", "127.0.0.1:0", "-config", dir)

	hostPort := func(base string) (net.IP, string) {
		u, err := url.Parse(base)
		require.NoError(t, err, base)
		return net.ParseIP(u.Hostname()), u.Port()
	}
	ip, adminPort := hostPort(r.admin)
	assert.True(t, ip.IsUnspecified(), "the admin listener is on every interface: %s", r.admin)
	ip, debugPort := hostPort(r.debug)
	assert.True(t, ip.IsLoopback(), "the debug listener is on loopback: %s", r.debug)
	admin, debug := "http://127.0.0.1:"+adminPort, "http://127.0.0.1:"+debugPort

	code, body := httpGet(t, admin+"/healthcheck")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"status":"ok"`)
	code, body = httpGet(t, admin+"/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "rate_limit_config_rules 1")
	for _, path := range []string{"/rlconfig", "/debug/pprof/", "/debug/pprof/goroutine"} {
		code, _ = httpGet(t, admin+path)
		assert.Equal(t, http.StatusNotFound, code, "the admin listener does not serve %s", path)
	}

	code, body = httpGet(t, debug+"/")
	assert.Equal(t, http.StatusOK, code)
	for _, e := range debugEndpoints {
		assert.Contains(t, body, e.path+": ")
	}
	code, body = httpGet(t, debug+"/rlconfig")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "edge.remote_address: 2/hour")
	code, body = httpGet(t, debug+"/debug/pprof/goroutine?debug=1")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "goroutine profile:")
	code, body = httpGet(t, debug+"/debug/pprof/")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "heap")
	code, body = httpGet(t, debug+"/debug/pprof/cmdline")
	assert.Equal(t, http.StatusOK, code)
	assert.NotEmpty(t, body)
	code, _ = httpGet(t, debug+"/metrics")
	assert.Equal(t, http.StatusNotFound, code, "metrics are the admin listener's")
	require.NoError(t, r.stop())
	_, err := http.Get(debug + "/")
	assert.Error(t, err, "the debug listener stops with the service")
}
