package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// The command serves RLS over gRPC against a private Redis, with its admin
// listener, and stops cleanly, reporting what it spent.
func TestRLSServesAndStops(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
`), 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"rls", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-config", dir, "-redis", srv.Addr(), "-prefix", "t:"}, out)
	}()
	var grpcAddr, admin string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`rls listening on grpc (\S+), admin (\S+) \(async mode; 1 rules in 1 domains`).FindStringSubmatch(out.String())
		if m != nil {
			grpcAddr, admin = m[1], m[2]
		}
		return m != nil
	}, 10*time.Second, 5*time.Millisecond, "the service starts: %s", out)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	request := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}}
	var got []rlsv3.RateLimitResponse_Code
	for range 3 {
		resp, err := client.ShouldRateLimit(ctx, request)
		require.NoError(t, err)
		got = append(got, resp.GetOverallCode())
	}
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}, got)
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, hc.GetStatus())

	get := func(path string) string {
		resp, err := http.Get(admin + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	body := get("/metrics")
	assert.Contains(t, body, `rate_limit_requests_total{result="limited"} 1`)
	assert.Contains(t, body, `rate_limit_config_rules 1`)
	assert.Contains(t, body, `rate_limit_mode{mode="async"} 1`)
	assert.Contains(t, body, "go_goroutines ")
	assert.Contains(t, body, "process_open_fds ")
	assert.Contains(t, get("/rlconfig"), "edge.remote_address: 2/hour")
	assert.Contains(t, get("/healthz"), `"status":"ok"`)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "a clean shutdown")
	case <-time.After(20 * time.Second):
		t.Fatal("the service did not stop")
	}
	assert.Contains(t, out.String(), "shutting down")
	// Close reported the spend: Redis holds the counts under the prefix.
	keys, err := srv.Do("KEYS", "t:*")
	require.NoError(t, err)
	assert.NotEmpty(t, keys)
}

func TestRLSRefusesABadConfig(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644))
	err := run(context.Background(), []string{"rls", "-grpc", "127.0.0.1:0", "-admin", "", "-config", dir}, io.Discard)
	assert.ErrorContains(t, err, `config: a.yaml: line 4, column 24: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`)
	err = run(context.Background(), []string{"rls", "-config", filepath.Join(dir, "missing")}, io.Discard)
	assert.ErrorContains(t, err, "rls:")
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

	// Their defaults.
	s, err = parseRLSFlags(nil, io.Discard, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:8081", s.grpcAddr)
	assert.Equal(t, "/srv/runtime_data/current/config", s.configDir)
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
