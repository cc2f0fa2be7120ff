package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/envoyrls/config"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/metrics"
)

// rlsSettings are the rls command's settings. Each flag's default comes from
// the environment variable envoyproxy/ratelimit reads for the same setting
// (docs/envoy.md maps them), so a deployment migrates with its environment.
type rlsSettings struct {
	grpcAddr, grpcUDS, adminAddr string
	debugAddr                    string // "": no debug listener
	configDir                    string
	mergeDomains                 bool

	redisURL, redisType, redisSocket, redisAuth, redisSentinelAuth string
	redisTLS, redisTLSSkipVerify                                   bool
	redisTLSCA, redisTLSCert, redisTLSKey                          string
	redisPool                                                      int
	redisTimeout                                                   time.Duration
	prefix                                                         string

	mode                          hybrid.Mode
	fallback                      hybrid.Fallback
	syncInterval, decisionTimeout time.Duration
	fleetSize                     int
	askWait                       time.Duration
	countReadWait                 time.Duration

	shadowMode, quotaMode, headers bool
	headerNames                    envoyrls.Headers
	nearLimitRatio                 float64

	maxKeys, maxKeyBytes int

	logLevel, logFormat     string
	maxConnAge, maxConnDrop time.Duration
	drain                   time.Duration
	reflection              bool
	configRequired          bool
}

// defaultMaxKeys is -max-keys's default: with -max-key-bytes at its
// default, the keys of a flood of distinct values fit a 256 MiB container
// with room for the rest (docs/benchmarks.md measures it).
const defaultMaxKeys = 100_000

// env reads the environment for flag defaults, collecting what it cannot
// parse.
type env struct {
	lookup func(string) (string, bool)
	errs   []error
}

func (e *env) str(name, def string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return def
}

func (e *env) boolean(name string, def bool) bool {
	v, ok := e.lookup(name)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want true or false", name, v))
	}
	return b
}

func (e *env) integer(name string, def int) int {
	v, ok := e.lookup(name)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want an integer", name, v))
	}
	return n
}

func (e *env) float(name string, def float64) float64 {
	v, ok := e.lookup(name)
	if !ok || v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want a number", name, v))
	}
	return f
}

func (e *env) duration(name string, def time.Duration) time.Duration {
	v, ok := e.lookup(name)
	if !ok || v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want a duration such as 10s", name, v))
	}
	return d
}

// redis is the Redis the environment names: envoyproxy/ratelimit's
// REDIS_URL, or REDIS_ADDR, which every command reads. Both set, to
// different Redis servers, is a mistake in the environment.
func (e *env) redis() string {
	url, addr := e.str("REDIS_URL", ""), e.str("REDIS_ADDR", "")
	if url != "" && addr != "" && url != addr {
		e.errs = append(e.errs, fmt.Errorf("REDIS_URL=%q and REDIS_ADDR=%q name different Redis servers: set one", url, addr))
	}
	return cmp.Or(url, addr)
}

// hostPort joins the host and port variables name_HOST and name_PORT.
func (e *env) hostPort(prefix, defHost string, defPort int) string {
	return net.JoinHostPort(e.str(prefix+"HOST", defHost), strconv.Itoa(e.integer(prefix+"PORT", defPort)))
}

// debug is the debug listener's address the environment asks for:
// DEBUG_HOST:DEBUG_PORT, on loopback (127.0.0.1) and envoyproxy/ratelimit's
// port 6070 unless told, when either is set; else none.
func (e *env) debug() string {
	host, _ := e.lookup("DEBUG_HOST")
	port, _ := e.lookup("DEBUG_PORT")
	if host == "" && port == "" {
		return ""
	}
	return e.hostPort("DEBUG_", "127.0.0.1", 6070)
}

// parseRLSFlags reads the rls command's flags, with defaults from lookup
// (the environment).
func parseRLSFlags(args []string, out io.Writer, lookup func(string) (string, bool)) (*rlsSettings, error) {
	e := &env{lookup: lookup}
	s := &rlsSettings{}
	fs := newFlagSet("rls", out)
	fs.StringVar(&s.grpcAddr, "grpc", e.hostPort("GRPC_", "0.0.0.0", 8081), "where the rate limit service listens for gRPC (env GRPC_HOST, GRPC_PORT)")
	fs.StringVar(&s.grpcUDS, "grpc-uds", e.str("GRPC_UDS", ""), "a unix socket to listen on instead of -grpc (env GRPC_UDS)")
	fs.StringVar(&s.adminAddr, "admin", e.hostPort("", "0.0.0.0", 8080), "where /metrics and /healthcheck (/healthz) are served over HTTP, for probes and scrapers: every interface, as envoyproxy/ratelimit's; 127.0.0.1:8080 (HOST=127.0.0.1) keeps it on loopback; empty for none (env HOST, PORT)")
	fs.StringVar(&s.debugAddr, "debug", e.debug(), "where pprof (/debug/pprof/) and the rules in force (/rlconfig) are served over HTTP, as envoyproxy/ratelimit's debug port; none unless asked for: 127.0.0.1:6070 keeps it on loopback (env DEBUG_HOST, DEBUG_PORT: either one set asks for it, on 127.0.0.1 and port 6070 unless the other says otherwise)")
	runtimeDir := filepath.Join(e.str("RUNTIME_ROOT", "/srv/runtime_data/current"), e.str("RUNTIME_SUBDIRECTORY", ""), e.str("RUNTIME_APPDIRECTORY", "config"))
	fs.StringVar(&s.configDir, "config", runtimeDir, "the directory of envoyproxy/ratelimit YAML files, reloaded on change (env RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY)")
	fs.BoolVar(&s.mergeDomains, "merge-domains", e.boolean("MERGE_DOMAIN_CONFIG", false), "let several files configure one domain (env MERGE_DOMAIN_CONFIG)")
	fs.BoolVar(&s.configRequired, "config-required", e.boolean("HYBRIDLIMIT_CONFIG_REQUIRED", false), "exit at start when the configuration directory does not load; by default the service starts, answers every call with an error and reports NOT_SERVING until a valid configuration loads, as envoyproxy/ratelimit does (env HYBRIDLIMIT_CONFIG_REQUIRED)")

	fs.StringVar(&s.redisURL, "redis", e.redis(), "the Redis: host:port, a unix socket path or redis:// URL; master,sentinel1,... for sentinel; host1:port,host2:port for cluster; empty: local only (env REDIS_URL, as envoyproxy/ratelimit, or REDIS_ADDR, as the other commands)")
	fs.StringVar(&s.redisType, "redis-type", strings.ToLower(e.str("REDIS_TYPE", "single")), "single, sentinel or cluster (env REDIS_TYPE)")
	fs.StringVar(&s.redisSocket, "redis-socket-type", strings.ToLower(e.str("REDIS_SOCKET_TYPE", "")), "tcp or unix; empty: unix for a path, else tcp (env REDIS_SOCKET_TYPE)")
	fs.StringVar(&s.redisAuth, "redis-auth", e.str("REDIS_AUTH", ""), "password, or user:password (env REDIS_AUTH)")
	fs.StringVar(&s.redisSentinelAuth, "redis-sentinel-auth", e.str("REDIS_SENTINEL_AUTH", ""), "the sentinels' password (env REDIS_SENTINEL_AUTH)")
	fs.BoolVar(&s.redisTLS, "redis-tls", e.boolean("REDIS_TLS", false), "connect to Redis over TLS (env REDIS_TLS)")
	fs.StringVar(&s.redisTLSCA, "redis-tls-cacert", e.str("REDIS_TLS_CACERT", ""), "CA certificate file for Redis TLS (env REDIS_TLS_CACERT)")
	fs.StringVar(&s.redisTLSCert, "redis-tls-cert", e.str("REDIS_TLS_CLIENT_CERT", ""), "client certificate file for Redis TLS (env REDIS_TLS_CLIENT_CERT)")
	fs.StringVar(&s.redisTLSKey, "redis-tls-key", e.str("REDIS_TLS_CLIENT_KEY", ""), "client key file for Redis TLS (env REDIS_TLS_CLIENT_KEY)")
	fs.BoolVar(&s.redisTLSSkipVerify, "redis-tls-skip-hostname-verification", e.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false), "do not verify Redis's certificate (env REDIS_TLS_SKIP_HOSTNAME_VERIFICATION)")
	fs.IntVar(&s.redisPool, "redis-pool-size", e.integer("REDIS_POOL_SIZE", 10), "Redis connections per node (env REDIS_POOL_SIZE)")
	fs.DurationVar(&s.redisTimeout, "redis-timeout", e.duration("REDIS_TIMEOUT", time.Second), "dial, read and write timeout of the Redis client; no decision waits on it except in sync mode (env REDIS_TIMEOUT)")
	fs.StringVar(&s.prefix, "prefix", e.str("CACHE_KEY_PREFIX", "rls:"), "starts every Redis key (env CACHE_KEY_PREFIX)")

	s.mode = hybrid.Async
	fs.Func("mode", modeUsage+" (env HYBRIDLIMIT_MODE)", func(v string) error {
		m, err := parseMode(v)
		s.mode = m
		return err
	})
	if v, ok := lookup("HYBRIDLIMIT_MODE"); ok && v != "" {
		m, err := parseMode(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("HYBRIDLIMIT_MODE: %w", err))
		}
		s.mode = m
	}
	fs.Func("fallback", "while Redis is down: conservative (the limit divided among the nodes; the default), fail-open or fail-closed (env HYBRIDLIMIT_FALLBACK)", func(v string) error {
		f, err := parseFallback(v)
		s.fallback = f
		return err
	})
	if v, ok := lookup("HYBRIDLIMIT_FALLBACK"); ok && v != "" {
		f, err := parseFallback(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("HYBRIDLIMIT_FALLBACK: %w", err))
		}
		s.fallback = f
	}
	fs.DurationVar(&s.syncInterval, "sync-interval", e.duration("HYBRIDLIMIT_SYNC_INTERVAL", hybrid.DefaultSyncInterval), "async mode: time between reconciliations with Redis (env HYBRIDLIMIT_SYNC_INTERVAL)")
	fs.DurationVar(&s.decisionTimeout, "decision-timeout", e.duration("HYBRIDLIMIT_REDIS_TIMEOUT", hybrid.DefaultRedisTimeout), "sync mode: the longest a decision waits on Redis before deciding from memory (env HYBRIDLIMIT_REDIS_TIMEOUT)")
	fs.DurationVar(&s.askWait, "ask-wait", e.duration("HYBRIDLIMIT_ASK_WAIT", defaultRLSAskWait), "async mode: the longest a check beyond its instance's share waits for the fleet to make room, kept under Envoy's 20 ms timeout; negative: never wait (env HYBRIDLIMIT_ASK_WAIT)")
	fs.DurationVar(&s.countReadWait, "count-read-wait", e.duration("HYBRIDLIMIT_COUNT_READ_WAIT", envoyrls.DefaultCountReadWait), "the longest the first call for a key in a window (a new key, or any after a restart) waits to read the fleet's count from Redis; past it the call goes on with what this instance knows (env HYBRIDLIMIT_COUNT_READ_WAIT)")
	fs.IntVar(&s.fleetSize, "fleet-size", e.integer("HYBRIDLIMIT_FLEET_SIZE", 0), "instances sharing the limits, to divide them by while Redis is down; 0: as last seen in Redis (env HYBRIDLIMIT_FLEET_SIZE)")

	fs.BoolVar(&s.shadowMode, "shadow-mode", e.boolean("SHADOW_MODE", false), "never answer OVER_LIMIT overall, while counting (env SHADOW_MODE)")
	fs.BoolVar(&s.quotaMode, "quota-mode", e.boolean("QUOTA_MODE", false), "answer OK for every descriptor over its limit (env QUOTA_MODE)")
	fs.BoolVar(&s.headers, "response-headers", e.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false), "ask Envoy to add limit, remaining and reset headers (env LIMIT_RESPONSE_HEADERS_ENABLED)")
	fs.StringVar(&s.headerNames.Limit, "limit-header", e.str("LIMIT_LIMIT_HEADER", envoyrls.DefaultHeaders.Limit), "with -response-headers, the name of the header carrying the limit of the descriptor closest to its limit (env LIMIT_LIMIT_HEADER)")
	fs.StringVar(&s.headerNames.Remaining, "remaining-header", e.str("LIMIT_REMAINING_HEADER", envoyrls.DefaultHeaders.Remaining), "with -response-headers, the name of the header carrying the requests that descriptor has left (env LIMIT_REMAINING_HEADER)")
	fs.StringVar(&s.headerNames.Reset, "reset-header", e.str("LIMIT_RESET_HEADER", envoyrls.DefaultHeaders.Reset), "with -response-headers, the name of the header carrying the seconds until that descriptor's window resets (env LIMIT_RESET_HEADER)")
	fs.Float64Var(&s.nearLimitRatio, "near-limit-ratio", e.float("NEAR_LIMIT_RATIO", 0.8), "a check is near its limit past this fraction of it, for rate_limit_near_limit_total (env NEAR_LIMIT_RATIO)")
	fs.IntVar(&s.maxKeys, "max-keys", e.integer("HYBRIDLIMIT_MAX_KEYS", defaultMaxKeys), "counters held in memory; beyond, the least recently used are evicted (rate_limit_keys_evicted_total), an evicted counter coming back as spent as it was (env HYBRIDLIMIT_MAX_KEYS)")
	fs.IntVar(&s.maxKeyBytes, "max-key-bytes", e.integer("HYBRIDLIMIT_MAX_KEY_BYTES", envoyrls.DefaultMaxKeyBytes), "a counter whose name (domain, descriptor keys and values) is longer is counted under a 25-byte digest of it, each distinct name still apart (rate_limit_long_keys_total); at least 32 (env HYBRIDLIMIT_MAX_KEY_BYTES)")

	fs.StringVar(&s.logLevel, "log-level", strings.ToLower(e.str("LOG_LEVEL", "info")), "debug, info, warn or error (env LOG_LEVEL)")
	fs.StringVar(&s.logFormat, "log-format", strings.ToLower(e.str("LOG_FORMAT", "text")), "text or json (env LOG_FORMAT)")
	fs.DurationVar(&s.maxConnAge, "grpc-max-connection-age", e.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour), "close gRPC connections older than this, so clients re-resolve (env GRPC_MAX_CONNECTION_AGE)")
	fs.DurationVar(&s.maxConnDrop, "grpc-max-connection-age-grace", e.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour), "then force them closed after this (env GRPC_MAX_CONNECTION_AGE_GRACE)")
	fs.DurationVar(&s.drain, "shutdown-timeout", 10*time.Second, "on SIGTERM, how long in-flight calls may finish before the server stops (as the gateway's flag)")
	fs.BoolVar(&s.reflection, "grpc-reflection", e.boolean("HYBRIDLIMIT_GRPC_REFLECTION", true), "serve gRPC server reflection, for grpcurl and the like; -grpc-reflection=false turns it off (env HYBRIDLIMIT_GRPC_REFLECTION)")
	if err := parseFlags(fs, args, false); err != nil {
		return nil, err
	}
	if len(e.errs) > 0 {
		return nil, misuse(fs, fmt.Errorf("rls: environment: %w", errors.Join(e.errs...)))
	}
	switch {
	case s.nearLimitRatio <= 0 || s.nearLimitRatio > 1:
		return nil, misuse(fs, fmt.Errorf("rls: -near-limit-ratio %v: want a fraction in (0, 1]", s.nearLimitRatio))
	case s.drain <= 0:
		return nil, misuse(fs, fmt.Errorf("rls: -shutdown-timeout %v: want a positive duration", s.drain))
	case s.maxKeys <= 0:
		return nil, misuse(fs, fmt.Errorf("rls: -max-keys %d: want a positive number", s.maxKeys))
	case s.maxKeyBytes < 32:
		return nil, misuse(fs, fmt.Errorf("rls: -max-key-bytes %d: want at least 32", s.maxKeyBytes))
	}
	if err := distinctListeners(map[string]string{"-grpc": s.grpcAddr, "-admin": s.adminAddr, "-debug": s.debugAddr}); err != nil {
		return nil, misuse(fs, err)
	}
	if _, err := s.logger(io.Discard); err != nil {
		return nil, misuse(fs, err)
	}
	// The Redis settings, checked before anything starts (a client does no
	// I/O until it is used).
	client, err := s.redisClient()
	if err != nil {
		return nil, misuse(fs, err)
	}
	if client != nil {
		_ = client.Close()
	}
	return s, nil
}

// distinctListeners refuses two listeners (flag name to address) on one
// port of one host, every interface (0.0.0.0, ::, no host) clashing with
// any host; an empty address (none) and port 0 (any free port) never
// clash.
func distinctListeners(addrs map[string]string) error {
	names := make([]string, 0, len(addrs))
	for name := range addrs {
		names = append(names, name)
	}
	slices.Sort(names)
	type listener struct{ name, host, port string }
	var seen []listener
	every := func(host string) bool { return host == "" || net.ParseIP(host).IsUnspecified() }
	for _, name := range names {
		addr := addrs[name]
		if addr == "" {
			continue
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("rls: %s %q: want host:port", name, addr)
		}
		if port == "0" {
			continue
		}
		for _, o := range seen {
			if o.port == port && (o.host == host || every(o.host) || every(host)) {
				return fmt.Errorf("rls: %s and %s are both on port %s of %s: give each listener its own port", o.name, name, port, cmp.Or(host, o.host, "every interface"))
			}
		}
		seen = append(seen, listener{name, host, port})
	}
	return nil
}

func parseFallback(v string) (hybrid.Fallback, error) {
	switch strings.ToLower(v) {
	case "conservative":
		return hybrid.Conservative, nil
	case "fail-open", "failopen", "open":
		return hybrid.FailOpen, nil
	case "fail-closed", "failclosed", "closed":
		return hybrid.FailClosed, nil
	}
	return hybrid.Conservative, fmt.Errorf("unknown fallback %q (want conservative, fail-open or fail-closed)", v)
}

// logger returns the command's structured logger, on out.
func (s *rlsSettings) logger(out io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch s.logLevel {
	case "debug", "trace":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error", "fatal", "panic":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("rls: -log-level %q: want debug, info, warn or error", s.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch s.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(out, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(out, opts)), nil
	}
	return nil, fmt.Errorf("rls: -log-format %q: want text or json", s.logFormat)
}

// redisClient returns the client the settings name, nil for none.
func (s *rlsSettings) redisClient() (redis.UniversalClient, error) {
	if s.redisURL == "" {
		return nil, nil
	}
	var tlsCfg *tls.Config
	if s.redisTLS {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.redisTLSSkipVerify} // #nosec G402: the user's explicit choice
		if s.redisTLSCA != "" {
			pem, err := os.ReadFile(s.redisTLSCA)
			if err != nil {
				return nil, fmt.Errorf("rls: -redis-tls-cacert: %w", err)
			}
			tlsCfg.RootCAs = x509.NewCertPool()
			if !tlsCfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("rls: -redis-tls-cacert %s: no PEM certificate in it", s.redisTLSCA)
			}
		}
		if s.redisTLSCert != "" || s.redisTLSKey != "" {
			cert, err := tls.LoadX509KeyPair(s.redisTLSCert, s.redisTLSKey)
			if err != nil {
				return nil, fmt.Errorf("rls: -redis-tls-cert/-redis-tls-key: %w", err)
			}
			tlsCfg.Certificates = []tls.Certificate{cert}
		}
	}
	user, pass := "", s.redisAuth
	if u, p, ok := strings.Cut(s.redisAuth, ":"); ok {
		user, pass = u, p
	}
	t := s.redisTimeout
	switch s.redisType {
	case "single":
		if strings.HasPrefix(s.redisURL, "redis://") || strings.HasPrefix(s.redisURL, "rediss://") || strings.HasPrefix(s.redisURL, "unix://") {
			o, err := redis.ParseURL(s.redisURL)
			if err != nil {
				return nil, fmt.Errorf("rls: -redis %q: %w", s.redisURL, err)
			}
			o.PoolSize, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.ContextTimeoutEnabled = s.redisPool, t, t, t, true
			if tlsCfg != nil {
				o.TLSConfig = tlsCfg
			}
			return redis.NewClient(o), nil
		}
		network := s.redisSocket
		if network == "" {
			network = "tcp"
			if strings.HasPrefix(s.redisURL, "/") {
				network = "unix"
			}
		}
		if network != "tcp" && network != "unix" {
			return nil, fmt.Errorf("rls: -redis-socket-type %q: want tcp or unix", s.redisSocket)
		}
		return redis.NewClient(&redis.Options{Network: network, Addr: s.redisURL, Username: user, Password: pass, TLSConfig: tlsCfg,
			PoolSize: s.redisPool, DialTimeout: t, ReadTimeout: t, WriteTimeout: t, ContextTimeoutEnabled: true}), nil
	case "sentinel":
		parts := strings.Split(s.redisURL, ",")
		if len(parts) < 2 {
			return nil, fmt.Errorf("rls: -redis %q: a sentinel setup is written master-name,sentinel1:port[,sentinel2:port]", s.redisURL)
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: parts[0], SentinelAddrs: parts[1:], SentinelPassword: s.redisSentinelAuth,
			Username: user, Password: pass, TLSConfig: tlsCfg, PoolSize: s.redisPool, DialTimeout: t, ReadTimeout: t, WriteTimeout: t, ContextTimeoutEnabled: true}), nil
	case "cluster":
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(s.redisURL, ","), Username: user, Password: pass, TLSConfig: tlsCfg,
			PoolSize: s.redisPool, DialTimeout: t, ReadTimeout: t, WriteTimeout: t, ContextTimeoutEnabled: true}), nil
	}
	return nil, fmt.Errorf("rls: -redis-type %q: want single, sentinel or cluster", s.redisType)
}

// runRLS serves Envoy's rate limit service (RLS v3 over gRPC) from the
// limiter, with envoyproxy/ratelimit's configuration directory, until ctx
// ends (SIGINT, SIGTERM); then it turns its health to NOT_SERVING, lets
// calls in flight finish, and reports what was spent. SIGHUP reloads the
// configuration at once.
func runRLS(ctx context.Context, args []string, out io.Writer) error {
	s, err := parseRLSFlags(args, out, os.LookupEnv)
	if err != nil {
		return err
	}
	log, err := s.logger(out)
	if err != nil {
		return err
	}
	routeLibraryLogs(log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cm, err := envoyrls.NewConfigMetrics(reg, "", nil)
	if err != nil {
		return err
	}
	var (
		loaded atomic.Bool                   // a configuration is in force
		hsp    atomic.Pointer[health.Server] // set once the gRPC server exists
	)
	watcher, err := config.Watch(ctx, s.configDir, config.WatchOptions{
		DirOptions:         config.DirOptions{Options: config.Options{MergeDomains: s.mergeDomains}},
		StartWithoutConfig: !s.configRequired,
		OnChange: func(c *config.Config) {
			cm.OnChange(c)
			loaded.Store(true)
			log.Info("rls: configuration loaded", "dir", s.configDir, "rules", c.Len(), "domains", c.Domains())
			if hs := hsp.Load(); hs != nil {
				envoyrls.SetServing(hs, true)
			}
		},
		OnError: func(err error) {
			cm.OnError(err)
			if loaded.Load() {
				log.Error("rls: configuration not reloaded: keeping the one in force", "dir", s.configDir, "err", err)
				return
			}
			log.Error("rls: no valid configuration: every call is answered with an error (Unavailable) and the health is NOT_SERVING until one loads (-config-required exits instead)",
				"dir", s.configDir, "err", err)
		},
	})
	if err != nil {
		return fmt.Errorf("rls: %w", err)
	}
	defer watcher.Close()
	if c := watcher.Current(); c != nil {
		cm.Set(c)
		loaded.Store(true)
	}
	near := 1 - s.nearLimitRatio // their ratio is of the limit used; ours of the limit left
	if near == 0 {
		near = -1 // a ratio of 1: nothing is ever near
	}
	rec, err := metrics.New(reg, metrics.Options{NearLimit: near})
	if err != nil {
		return err
	}
	client, err := s.redisClient()
	if err != nil {
		return err
	}
	if client != nil {
		defer client.Close()
	} else if s.mode != hybrid.LocalOnly {
		log.Warn("rls: no Redis (-redis, REDIS_URL or REDIS_ADDR): each instance limits on its own")
	}
	if client != nil && s.fleetSize == 0 && s.fallback == hybrid.Conservative {
		log.Info("rls: no -fleet-size: if Redis is down when this instance starts, it does not start (it has not seen the fleet to divide the limits by)")
	}
	lim, err := hybrid.New(s.limiterConfig(client, log, rec.ObserveRound))
	if err != nil {
		return s.startError(err)
	}
	closeLimiter := func() error {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return lim.Close(c)
	}
	if err := rec.Watch(lim); err != nil {
		_ = closeLimiter()
		return err
	}
	scfg := envoyrls.Config{Limiter: lim, Rules: watcher.Current, Observer: rec, Logger: log, ShadowMode: s.shadowMode, QuotaMode: s.quotaMode,
		MaxKeyBytes: s.maxKeyBytes, Prefix: s.prefix, SyncInterval: s.syncInterval, CountReadWait: s.countReadWait, MaxCounts: s.maxKeys}
	if s.mode != hybrid.LocalOnly && client != nil {
		scfg.Redis = client // the windows' counts, as envoyproxy/ratelimit keeps them
	}
	if s.headers {
		scfg.Headers = s.headerNames
	}
	svc, err := envoyrls.New(scfg)
	if err != nil {
		_ = closeLimiter()
		return err
	}
	closeLimiter = func() error {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := svc.Close(c); err != nil { // the counts not yet sent, before the limiter's spend
			log.Warn("rls: the last counts were not all sent to Redis", "err", err)
		}
		return lim.Close(c)
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rate_limit", Name: "long_keys_total",
		Help: "Counters whose name was longer than -max-key-bytes, counted under a digest of it (each distinct name still apart)."},
		func() float64 { return float64(svc.LongKeys()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rate_limit", Name: "count_reads_total",
		Help: "Reads of a window's count from Redis by a call: the first call for a key this instance did not hold in the window before."},
		func() float64 { return float64(svc.CountStats().Reads) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rate_limit", Name: "count_reads_failed_total",
		Help: "Reads of a window's count that failed or took longer than they may: the call went on with what the instance knew."},
		func() float64 { return float64(svc.CountStats().ReadsFailed) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rate_limit", Name: "counts_untracked_total",
		Help: "Calls whose window count was not kept, -max-keys counts being held: decided by the limiter alone."},
		func() float64 { return float64(svc.CountStats().Untracked) }))
	grpcSrv, hs := envoyrls.NewServer(svc, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: s.maxConnAge, MaxConnectionAgeGrace: s.maxConnDrop}))
	hsp.Store(hs)
	if watcher.Current() != nil { // one that loaded before hsp was set
		envoyrls.SetServing(hs, true)
	}
	if s.reflection {
		reflection.Register(grpcSrv)
	}
	var ln net.Listener
	if s.grpcUDS != "" {
		ln, err = net.Listen("unix", s.grpcUDS)
	} else {
		ln, err = net.Listen("tcp", s.grpcAddr)
	}
	if err != nil {
		_ = closeLimiter()
		return fmt.Errorf("rls: gRPC listener: %w", err)
	}
	var draining atomic.Bool
	admin, err := envoyrls.AdminHandler(envoyrls.AdminConfig{Gatherer: reg, Limiter: lim, Rules: watcher.Current, Draining: draining.Load})
	if err != nil {
		_ = ln.Close()
		_ = closeLimiter()
		return err
	}
	var httpSrvs httpListeners
	adminURL, err := httpSrvs.serve("admin", s.adminAddr, admin)
	var debugURL string
	if err == nil {
		debugURL, err = httpSrvs.serve("debug", s.debugAddr, debugHandler(watcher.Current))
	}
	if err != nil {
		httpSrvs.shutdown()
		_ = ln.Close()
		_ = closeLimiter()
		return err
	}
	rules, domains := 0, 0
	if cfg := watcher.Current(); cfg != nil {
		rules, domains = cfg.Len(), len(cfg.Domains())
	}
	log.Info("rls: listening", "grpc", ln.Addr().String(), "admin", adminURL, "debug", debugURL, "mode", lim.Mode().String(), "rules", rules, "domains", domains,
		"dir", watcher.Dir(), "reflection", s.reflection, "max_keys", s.maxKeys, "max_key_bytes", s.maxKeyBytes)

	pollCtx, stopPoll := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		logEvictions(pollCtx, lim, log, s.maxKeys, evictionPoll)
	}()
	defer func() { stopPoll(); <-polled }()

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	served := make(chan error, 1)
	go func() { served <- grpcSrv.Serve(ln) }()
	for done := false; !done; {
		select {
		case err = <-served:
			done = true
		case <-hup:
			if rerr := watcher.Reload(); rerr != nil {
				cm.OnError(rerr)
				log.Error("rls: configuration not reloaded: keeping the one in force", "dir", s.configDir, "err", rerr)
			}
		case <-ctx.Done():
			log.Info("rls: shutting down: draining calls in flight", "drain", s.drain)
			draining.Store(true)
			hs.Shutdown() // probes see NOT_SERVING while calls drain
			stopped := make(chan struct{})
			go func() { grpcSrv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(s.drain):
				grpcSrv.Stop()
				<-stopped
			}
			err = <-served
			done = true
		}
	}
	httpSrvs.shutdown()
	if cerr := closeLimiter(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("rls: reporting the last spend to Redis: %w", cerr))
	}
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// limiterConfig is the limiter the settings describe, on client (nil:
// local only).
func (s *rlsSettings) limiterConfig(client redis.UniversalClient, log *slog.Logger, onRound func(hybrid.RoundInfo)) hybrid.Config {
	return hybrid.Config{
		Redis: client, Prefix: s.prefix, Mode: s.mode, Fallback: s.fallback, SyncInterval: s.syncInterval,
		RedisTimeout: s.decisionTimeout, FleetSize: s.fleetSize, AskWait: s.askWait, StartDegraded: true, Logger: log, OnRound: onRound,
		MaxKeys: s.maxKeys, MaxPending: s.maxKeys,
	}
}

// startError is the error of a limiter that could not start, in the
// command's terms: a Redis unreachable at start, under the conservative
// defaultRLSAskWait is how long a check beyond its instance's share waits
// for the fleet by default: well under the 20 ms Envoy's rate limit filter
// gives a call by default, so a check that waits still answers in time.
const defaultRLSAskWait = 10 * time.Millisecond

// fallback without -fleet-size, names the flag (the library's error names
// its Config field).
func (s *rlsSettings) startError(err error) error {
	if !errors.Is(err, hybrid.ErrRedisUnavailable) || s.fallback != hybrid.Conservative || s.fleetSize != 0 {
		return fmt.Errorf("rls: %w", err)
	}
	cause := err
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range u.Unwrap() {
			if e != hybrid.ErrRedisUnavailable {
				cause = e
				break
			}
		}
	}
	return fmt.Errorf("rls: redis unreachable at start (%v): an instance that has never seen the fleet does not start degraded under the conservative fallback without -fleet-size (HYBRIDLIMIT_FLEET_SIZE), the number of instances to divide each limit by until Redis returns; set it, choose -fallback fail-open or fail-closed, or start the instance once Redis answers: %w",
		cause, hybrid.ErrRedisUnavailable)
}

// evictionPoll is how often the command looks whether the limiter evicted
// keys to hold -max-keys.
const evictionPoll = 5 * time.Second

// logEvictions logs, once, that the limiter began evicting keys to hold
// maxKeys (rate_limit_keys_evicted_total counts them), looking every
// period until ctx ends.
func logEvictions(ctx context.Context, lim *hybrid.Limiter, log *slog.Logger, maxKeys int, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := lim.Stats().Evictions; n > 0 {
			log.Warn("rls: the counters held reached -max-keys: the least recently used are evicted, each coming back as spent as it was (counted in rate_limit_keys_evicted_total; logged once)",
				"max_keys", maxKeys, "evicted", n)
			return
		}
	}
}

// libraryLogs routes go-redis's and gRPC's own log lines through the
// command's logger, so every line comes out in -log-format. Both libraries
// keep one process-wide logger: the command sets it, as a program may; the
// library packages of this module never do.
var libraryLogs struct {
	grpc sync.Once
	to   atomic.Pointer[slog.Logger]
}

// routeLibraryLogs sends the libraries' lines to log from now on.
func routeLibraryLogs(log *slog.Logger) {
	libraryLogs.to.Store(log)
	redis.SetLogger(redisLog{}) // atomic in go-redis
	// gRPC's is not safe to set while gRPC runs: set once, before this
	// command starts any; later commands only change where it writes.
	libraryLogs.grpc.Do(func() { grpclog.SetLoggerV2(grpcLog{}) })
}

// redisLog is go-redis's logger: its lines (a failed dial while Redis is
// down, a Sentinel's new master) at Warn.
type redisLog struct{}

func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	libraryLogs.to.Load().WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "source", "go-redis")
}

// grpcLog is gRPC's logger. gRPC writes only its errors by default; so
// here its info and warnings are at Debug, its errors at Error.
type grpcLog struct{}

func (grpcLog) log(level slog.Level, msg string) {
	libraryLogs.to.Load().Log(context.Background(), level, strings.TrimSpace(msg), "source", "grpc")
}

func (g grpcLog) Info(args ...any)    { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLog) Infoln(args ...any)  { g.log(slog.LevelDebug, fmt.Sprintln(args...)) }
func (g grpcLog) Warning(args ...any) { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLog) Error(args ...any)   { g.log(slog.LevelError, fmt.Sprint(args...)) }
func (g grpcLog) Errorln(args ...any) { g.log(slog.LevelError, fmt.Sprintln(args...)) }

func (g grpcLog) Warningln(args ...any) { g.log(slog.LevelDebug, fmt.Sprintln(args...)) }

func (g grpcLog) Infof(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}

func (g grpcLog) Warningf(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}

func (g grpcLog) Errorf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
}

// Fatal, Fatalln and Fatalf log at Error and exit, as gRPC's own do.
func (g grpcLog) Fatal(args ...any) { g.log(slog.LevelError, fmt.Sprint(args...)); os.Exit(1) }

func (g grpcLog) Fatalln(args ...any) { g.log(slog.LevelError, fmt.Sprintln(args...)); os.Exit(1) }

func (g grpcLog) Fatalf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// V reports whether gRPC's verbose lines are wanted: those of level 0,
// when the logger takes Debug.
func (grpcLog) V(l int) bool {
	return l <= 0 && libraryLogs.to.Load().Enabled(context.Background(), slog.LevelDebug)
}
