package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/metrics"
	"github.com/hybridlimit/hybridlimit/middleware"
	"github.com/hybridlimit/hybridlimit/rules"
	"github.com/hybridlimit/hybridlimit/upstream"
)

// runGateway is a reverse proxy that puts the limiter, the middleware and a
// rules file in front of an upstream URL, with an upstream circuit breaker,
// timeouts and a body limit; metrics, health and readiness are on a
// separate admin listener. It runs until ctx ends (SIGINT, SIGTERM), then
// turns unready, drains requests and reports what was spent.
func runGateway(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseGatewayFlags(args, out)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(out, nil))

	// Rules first: a bad file, or no limit at all, stops the gateway before
	// anything starts.
	current, stopRules, err := gatewayRules(ctx, o, log)
	if err != nil {
		return err
	}
	defer stopRules()

	// The metrics recorder comes before the limiter: New runs the first round.
	// The Go runtime and process collectors show a leak (goroutines, memory,
	// open files) to an operator.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mopts := metrics.Options{ClientLabelKey: clientLabelKey()}
	switch o.clientLabels {
	case "plain":
		mopts.ClientLabel = metrics.PlainClientLabel
	case "none":
		mopts.TopClients = -1
	}
	rec, err := metrics.New(reg, mopts)
	if err != nil {
		return err
	}
	client, where, err := gatewayRedis(o.redis)
	if err != nil {
		return err
	}
	if client != nil {
		defer client.Close()
	}
	if client != nil && o.startDegraded && o.fleetSize == 0 && o.fallback == hybrid.Conservative {
		log.Warn("-start-degraded without -fleet-size: if Redis is down at start, the gateway does not start (it has not seen the fleet to divide the limits by)")
	}
	lim, err := hybrid.New(hybrid.Config{Redis: client, Mode: o.mode, Fallback: o.fallback, FleetSize: o.fleetSize,
		StartDegraded: o.startDegraded, Prefix: "gw:", Logger: log, OnRound: rec.ObserveRound})
	if errors.Is(err, hybrid.ErrRedisUnavailable) {
		return fmt.Errorf("gateway: Redis at %s is unreachable: %w (start with -start-degraded to serve on the %s fallback until it returns)", where, err, o.fallback)
	}
	if err != nil {
		return err
	}
	closeLimiter := func() error {
		closing, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return lim.Close(closing)
	}
	if err := rec.Watch(lim); err != nil {
		return errors.Join(err, closeLimiter())
	}
	if lim.Degraded() {
		log.Warn("started degraded: Redis is unreachable; deciding on the fallback until it returns", "redis", where, "fallback", o.fallback)
	}

	maxBody := int64(o.maxBody)
	if maxBody == 0 {
		maxBody = -1 // the flag's 0 is no limit
	}
	proxy, err := upstream.New(upstream.Config{
		Target:                o.upstream,
		DialTimeout:           offIfZero(o.dialTimeout),
		ResponseHeaderTimeout: offIfZero(o.headerTimeout),
		Timeout:               offIfZero(o.upstreamTimeout),
		MaxBodyBytes:          maxBody,
		Failures:              uint32(o.failures),
		OpenFor:               o.openFor,
		FailureStatus:         func(s int) bool { return slices.Contains(o.failStatuses, s) },
		Logger:                log,
	})
	if err != nil {
		return errors.Join(err, closeLimiter())
	}
	defer proxy.Close()
	if err := reg.Register(newGatewayCollector(proxy)); err != nil {
		return errors.Join(err, closeLimiter())
	}

	mwc := o.keying.middleware()
	mwc.Limiter, mwc.Rules, mwc.OnError, mwc.Observer, mwc.Logger = lim, current, gatewayOnError(o, log), rec, log
	mw, err := middleware.New(mwc)
	if err != nil {
		return errors.Join(err, closeLimiter())
	}
	state := &gatewayState{lim: lim, proxy: proxy, unreadyWhenDegraded: o.unreadyWhenDegraded}

	public := &http.Server{
		Handler:           mw(proxy),
		ReadHeaderTimeout: o.readHeaderTimeout,
		ReadTimeout:       o.readTimeout,
		WriteTimeout:      o.writeTimeout,
		IdleTimeout:       o.idleTimeout,
		MaxHeaderBytes:    int(o.maxHeaderBytes),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug), // TLS and protocol noise from clients
	}
	servers := []*http.Server{public}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return errors.Join(err, closeLimiter())
	}
	listeners := []net.Listener{ln}
	if o.admin != "" {
		aln, err := net.Listen("tcp", o.admin)
		if err != nil {
			_ = ln.Close()
			return errors.Join(fmt.Errorf("gateway: -admin: %w", err), closeLimiter())
		}
		admin := &http.Server{Handler: state.adminMux(o, reg), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
		servers, listeners = append(servers, admin), append(listeners, aln)
		fmt.Fprintf(out, "admin listening on http://%s (%s, %s, %s)\n", aln.Addr(), o.metricsPath, o.healthPath, o.readyPath)
	}
	fmt.Fprintf(out, "gateway listening on http://%s, proxying to %s (%s mode)\n", ln.Addr(), o.upstream, lim.Mode())

	served := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { served <- srv.Serve(listeners[i]) }()
	}
	select {
	case err = <-served: // a listener failed
	case <-ctx.Done():
		state.draining.Store(true)
		if o.drainDelay > 0 {
			log.Info("draining: readiness answers 503 until the listener closes", "for", o.drainDelay)
			time.Sleep(o.drainDelay)
		}
	}
	shutdown, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	for _, srv := range servers {
		if serr := srv.Shutdown(shutdown); serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
	}
	cancel()
	if cerr := closeLimiter(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// gatewayRules loads the rules (a watched file, or the environment) and
// refuses rules that limit nothing unless -allow-unlimited.
func gatewayRules(ctx context.Context, o *gatewayOptions, log *slog.Logger) (current func() *rules.Rules, stop func(), err error) {
	if o.rulesFile == "" {
		rs, err := rules.Load("", os.LookupEnv)
		if err != nil {
			return nil, nil, err
		}
		if why := unlimited(rs); why != "" && !o.allowUnlimited {
			return nil, nil, fmt.Errorf("gateway: no limits: there is no -rules file and the RATE_LIMIT_* environment %s, so every request would pass unlimited; give -rules FILE or RATE_LIMIT_DEFAULT, or -allow-unlimited to run so anyway", why)
		}
		return rules.Static(rs), func() {}, nil
	}
	w, err := rules.Watch(ctx, o.rulesFile, rules.WatchOptions{
		Env:         os.LookupEnv,
		MaxFileSize: int64(o.rulesMaxSize),
		OnChange: func(rs *rules.Rules) {
			if why := unlimited(rs); why != "" {
				log.Warn("rules reloaded with no limits: every request passes unlimited", "file", o.rulesFile, "why", why)
				return
			}
			log.Info("rules reloaded", "file", o.rulesFile)
		},
		OnError: func(err error) { log.Error("rules not reloaded: keeping the old ones", "err", err) },
	})
	if err != nil {
		return nil, nil, err
	}
	if why := unlimited(w.Current()); why != "" && !o.allowUnlimited {
		_ = w.Close()
		return nil, nil, fmt.Errorf("gateway: no limits: %s %s, so every request would pass unlimited; add a limit, or -allow-unlimited to run so anyway", o.rulesFile, why)
	}
	return w.Current, func() { _ = w.Close() }, nil
}

// unlimited says why rs limit nothing, or "" if they limit something.
func unlimited(rs *rules.Rules) string {
	switch {
	case !rs.Enabled():
		return "turns rate limiting off (enabled: false)"
	case rs.MaxChecks() == 0:
		return "sets no limit"
	}
	return ""
}

// gatewayRedis makes the gateway's Redis client from -redis: host:port, or
// a redis:// or rediss:// URL (user, password, database, TLS). Deadlines
// reach the socket (ContextTimeoutEnabled), as Sync mode needs. where names
// the server without its password.
func gatewayRedis(addr string) (client redis.UniversalClient, where string, err error) {
	if addr == "" {
		return nil, "", nil
	}
	opts := &redis.Options{Addr: addr}
	if strings.Contains(addr, "://") {
		if opts, err = redis.ParseURL(addr); err != nil {
			return nil, "", fmt.Errorf("gateway: -redis: %w", err)
		}
	}
	opts.ContextTimeoutEnabled = true
	return redis.NewClient(opts), opts.Addr, nil
}

// gatewayOnError answers a request the middleware could not check: 401
// when the API key the keying needs is missing, else the middleware's
// default (400 for a malformed key, 500 for the rest, which is logged).
func gatewayOnError(o *gatewayOptions, log *slog.Logger) func(http.ResponseWriter, *http.Request, error) {
	needsKey := o.client == keyByAPIKey || o.client == keyByIPAndAPIKey
	body := fmt.Sprintf(`{"error":"unauthorized","message":"This service needs an API key in the %s header."}`, o.apiKeyHeader)
	return func(w http.ResponseWriter, r *http.Request, err error) {
		switch {
		case needsKey && errors.Is(err, httpkey.ErrNoKey):
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("WWW-Authenticate", fmt.Sprintf("ApiKey header=%q", o.apiKeyHeader))
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, body)
			return
		case !errors.Is(err, httpkey.ErrMalformed):
			log.Error("request not rate limited: answered 500", "err", err, "path", r.URL.Path)
		}
		middleware.DefaultOnError(w, r, err)
	}
}

// offIfZero maps a flag's "0: no limit" to upstream.Config's "negative: off".
func offIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// metricsHandler serves reg, at most a few scrapes at a time, each bounded.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second})
}
