package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/rules"
)

// gatewayOptions is the gateway's command line, parsed and checked.
type gatewayOptions struct {
	listen, admin       string
	upstream            *url.URL
	rulesFile           string
	rulesMaxSize        byteSize
	allowUnlimited      bool
	redis               string
	mode                hybrid.Mode
	fallback            hybrid.Fallback
	fleetSize           int
	startDegraded       bool
	unreadyWhenDegraded bool
	clientLabels        string // hashed, plain or none
	metricsPath         string
	healthPath          string
	readyPath           string
	keying              // who a client is: -trusted-proxies, -client, -api-key-header, -hash-api-keys

	// The public server's timeouts and limits (0: none).
	readHeaderTimeout, readTimeout, writeTimeout, idleTimeout time.Duration
	maxHeaderBytes                                            byteSize
	maxBody                                                   byteSize

	// The upstream's timeouts (0: none) and breaker.
	dialTimeout, headerTimeout, upstreamTimeout time.Duration
	failures                                    uint
	openFor                                     time.Duration
	failStatuses                                []int

	drainDelay, shutdownTimeout time.Duration
}

// The gateway's defaults: what a gateway facing the Internet should start
// with. docs/gateway.md says why each is what it is.
const (
	// defaultListen and defaultAdmin are on loopback until opened, and
	// apart from the rls command's defaults (gRPC 8081, admin 8080, after
	// envoyproxy/ratelimit), so both run on one host as they are.
	defaultListen = "127.0.0.1:8088"
	defaultAdmin  = "127.0.0.1:9090"

	defaultReadHeaderTimeout = 5 * time.Second
	defaultReadTimeout       = 30 * time.Second
	defaultWriteTimeout      = 35 * time.Second
	defaultIdleTimeout       = 30 * time.Second
	defaultMaxHeaderBytes    = 64 << 10
	defaultMaxBody           = 10 << 20
	defaultDialTimeout       = 5 * time.Second
	defaultHeaderTimeout     = 15 * time.Second
	defaultUpstreamTimeout   = 30 * time.Second
	defaultUpstreamFailures  = 5
	defaultUpstreamOpenFor   = 5 * time.Second
	defaultShutdownTimeout   = 25 * time.Second
)

// parseGatewayFlags reads the gateway's command line. Usage and errors go
// to out.
func parseGatewayFlags(args []string, out io.Writer) (*gatewayOptions, error) {
	o := &gatewayOptions{mode: hybrid.Async, maxHeaderBytes: defaultMaxHeaderBytes, maxBody: defaultMaxBody,
		failStatuses: []int{502, 503, 504}}
	fs := newFlagSet("gateway", out)

	fs.StringVar(&o.listen, "listen", defaultListen, "the public address to serve on")
	fs.StringVar(&o.admin, "admin", defaultAdmin, "the admin address for metrics, health and readiness (keep it private); empty for none")
	upstream := fs.String("upstream", "", "the service to proxy to, such as http://127.0.0.1:9000 (required)")
	fs.StringVar(&o.rulesFile, "rules", "", "the rules file (YAML, reloaded on change); empty: the RATE_LIMIT_* environment")
	o.rulesMaxSize = rules.DefaultMaxFileSize
	fs.Var(&o.rulesMaxSize, "rules-max-size", "the largest rules file read (a larger one is refused, and a reload to it keeps the rules in force): 1048576, 512KiB, 10MiB")
	fs.BoolVar(&o.allowUnlimited, "allow-unlimited", false, "start even when the rules set no limit (every request passes unlimited)")

	fs.StringVar(&o.redis, "redis", envRedis(), "the Redis the gateways share: host:port or a redis:// or rediss:// URL (default $REDIS_ADDR; empty: local only)")
	mode := modeFlag(fs)
	fs.Func("fallback", "while Redis is down: conservative (the limit divided among the nodes), fail-open or fail-closed (default conservative)", func(s string) error {
		for _, f := range []hybrid.Fallback{hybrid.Conservative, hybrid.FailOpen, hybrid.FailClosed} {
			if s == f.String() {
				o.fallback = f
				return nil
			}
		}
		return fmt.Errorf("unknown fallback %q (want conservative, fail-open or fail-closed)", s)
	})
	fs.IntVar(&o.fleetSize, "fleet-size", 0, "how many gateways share the limits, for the conservative fallback; 0: as last seen in Redis")
	fs.BoolVar(&o.startDegraded, "start-degraded", false, "start even while Redis is unreachable, on the fallback, and find Redis when it returns")
	fs.BoolVar(&o.unreadyWhenDegraded, "unready-when-degraded", false, "answer 503 on readiness while Redis is down (by default only while failing closed)")

	o.keying.register(fs)
	fs.Func("client-labels", "client_id in metrics: hashed, plain or none (default hashed; the key is $HYBRIDLIMIT_CLIENT_LABEL_KEY, else random)", func(s string) error {
		switch s {
		case "hashed", "plain", "none":
			o.clientLabels = s
			return nil
		}
		return fmt.Errorf("unknown client labels %q (want hashed, plain or none)", s)
	})
	fs.StringVar(&o.metricsPath, "metrics", "/metrics", "where Prometheus scrapes, on the admin listener; empty for none")
	fs.StringVar(&o.healthPath, "health", "/healthz", "the liveness endpoint, on the admin listener")
	fs.StringVar(&o.readyPath, "ready", "/readyz", "the readiness endpoint, on the admin listener")

	fs.DurationVar(&o.readHeaderTimeout, "read-header-timeout", defaultReadHeaderTimeout, "how long a client may take to send its request headers (0: no limit)")
	fs.DurationVar(&o.readTimeout, "read-timeout", defaultReadTimeout, "how long a client may take to send a whole request, body included (0: no limit)")
	fs.DurationVar(&o.writeTimeout, "write-timeout", defaultWriteTimeout, "how long a response may take, from the end of the request headers; above -upstream-timeout (0: no limit)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long an idle keep-alive connection is kept (0: -read-timeout)")
	fs.Var(&o.maxHeaderBytes, "max-header-bytes", "the largest request header block")
	fs.Var(&o.maxBody, "max-body", "the largest request body; larger ones get 413 (0: no limit)")

	fs.DurationVar(&o.dialTimeout, "upstream-dial-timeout", defaultDialTimeout, "how long connecting to the upstream may take (0: no limit)")
	fs.DurationVar(&o.headerTimeout, "upstream-header-timeout", defaultHeaderTimeout, "how long the upstream may take to start its answer (0: no limit)")
	fs.DurationVar(&o.upstreamTimeout, "upstream-timeout", defaultUpstreamTimeout, "how long a whole exchange with the upstream may take, body included (0: no limit)")
	fs.UintVar(&o.failures, "upstream-failures", defaultUpstreamFailures, "consecutive upstream failures that open its circuit breaker")
	fs.DurationVar(&o.openFor, "upstream-open-for", defaultUpstreamOpenFor, "how long the upstream's breaker stays open (answering 503) before it probes")
	fs.Func("upstream-fail-statuses", "upstream statuses that count as failures, comma-separated (default 502,503,504)", func(s string) error {
		o.failStatuses = nil
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 100 || n > 599 {
				return fmt.Errorf("status %q: want a number from 100 to 599", f)
			}
			o.failStatuses = append(o.failStatuses, n)
		}
		return nil
	})

	fs.DurationVar(&o.drainDelay, "drain-delay", 0, "on SIGTERM, how long readiness answers 503 before the listener closes, so load balancers stop sending")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long requests in flight may take to finish at shutdown")

	if err := parseFlags(fs, args, false); err != nil {
		return nil, err
	}
	o.mode = *mode
	if o.clientLabels == "" {
		o.clientLabels = "hashed"
	}
	if *upstream == "" {
		return nil, misuse(fs, errors.New("gateway: -upstream is required: the service to proxy to, such as http://127.0.0.1:9000"))
	}
	target, err := url.Parse(*upstream)
	if err != nil || target.Scheme == "" || target.Host == "" {
		return nil, misuse(fs, fmt.Errorf("gateway: -upstream %q: want an absolute URL such as http://127.0.0.1:9000", *upstream))
	}
	if target.Scheme != "http" && target.Scheme != "https" {
		return nil, misuse(fs, fmt.Errorf("gateway: -upstream %q: scheme %q, want http or https", *upstream, target.Scheme))
	}
	o.upstream = target
	return o, misuse(fs, o.check())
}

// check reports flag values that cannot work together.
func (o *gatewayOptions) check() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"read-header-timeout", o.readHeaderTimeout}, {"read-timeout", o.readTimeout}, {"write-timeout", o.writeTimeout},
		{"idle-timeout", o.idleTimeout}, {"upstream-dial-timeout", o.dialTimeout}, {"upstream-header-timeout", o.headerTimeout},
		{"upstream-timeout", o.upstreamTimeout}, {"drain-delay", o.drainDelay}, {"shutdown-timeout", o.shutdownTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("gateway: -%s %v is negative", d.name, d.v))
		}
	}
	if o.openFor <= 0 {
		errs = append(errs, fmt.Errorf("gateway: -upstream-open-for %v must be positive", o.openFor))
	}
	if o.failures == 0 || o.failures > 1<<20 {
		errs = append(errs, fmt.Errorf("gateway: -upstream-failures %d: want 1 or more", o.failures))
	}
	if o.writeTimeout > 0 && (o.upstreamTimeout == 0 || o.upstreamTimeout >= o.writeTimeout) {
		errs = append(errs, fmt.Errorf("gateway: -upstream-timeout %v must be shorter than -write-timeout %v, or clients are cut off before the gateway can answer 504", o.upstreamTimeout, o.writeTimeout))
	}
	if o.fleetSize < 0 {
		errs = append(errs, fmt.Errorf("gateway: -fleet-size %d is negative", o.fleetSize))
	}
	if o.maxHeaderBytes <= 0 {
		errs = append(errs, fmt.Errorf("gateway: -max-header-bytes %v must be positive", o.maxHeaderBytes))
	}
	if o.rulesMaxSize <= 0 {
		errs = append(errs, fmt.Errorf("gateway: -rules-max-size %v must be positive", &o.rulesMaxSize))
	}
	if o.admin != "" && o.admin == o.listen && !strings.HasSuffix(o.admin, ":0") {
		errs = append(errs, fmt.Errorf("gateway: -admin %s is the public -listen address: metrics and health must not be public", o.admin))
	}
	if strings.Contains(o.redis, "://") {
		if _, err := redis.ParseURL(o.redis); err != nil {
			errs = append(errs, fmt.Errorf("gateway: -redis: %w", err))
		}
	}
	if o.redis == "" && o.startDegraded {
		errs = append(errs, errors.New("gateway: -start-degraded needs -redis: without Redis the gateway is local only and never degraded"))
	}
	errs = append(errs, o.keying.check("gateway"))
	return errors.Join(errs...)
}

// clientLabelKey is the key hashed client labels use: the environment's, or
// nil for a random one.
func clientLabelKey() []byte {
	if k := os.Getenv("HYBRIDLIMIT_CLIENT_LABEL_KEY"); k != "" {
		return []byte(k)
	}
	return nil
}

// byteSize is a flag of a size in bytes: 1048576, 512KiB, 10MiB, 1GiB (or
// KB, MB, GB in powers of 1000).
type byteSize int64

func (b *byteSize) String() string {
	v := int64(*b)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v != 0 && v%u.n == 0 {
			return strconv.FormatInt(v/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(v, 10)
}

func (b *byteSize) Set(s string) error {
	units := []struct {
		suffix string
		n      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.n
			break
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return fmt.Errorf("size %q: want a whole number of bytes, such as 1048576, 512KiB or 10MiB", s)
	}
	*b = byteSize(v * mult)
	return nil
}
