package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/metrics"
	"github.com/hybridlimit/hybridlimit/middleware"
	"github.com/hybridlimit/hybridlimit/rules"
)

// runGateway is a reverse proxy that puts the limiter, the middleware and a
// rules file in front of an upstream URL, with Prometheus metrics and a
// health endpoint. It runs until ctx ends (SIGINT, SIGTERM), then drains
// requests and reports what was spent.
func runGateway(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(out)
	listen := fs.String("listen", "127.0.0.1:8080", "the address to serve on")
	upstream := fs.String("upstream", "", "the service to proxy to, such as http://127.0.0.1:9000")
	rulesFile := fs.String("rules", "", "the rules file (YAML, reloaded on change); empty: the RATE_LIMIT_* environment")
	addr := fs.String("redis", envRedis(), "the Redis the gateway's nodes share (default $REDIS_ADDR; empty: local only)")
	mode := modeFlag(fs)
	trusted := fs.String("trusted-proxies", "", "proxies whose X-Forwarded-For is believed: addresses and CIDRs, comma-separated")
	metricsPath := fs.String("metrics", "/metrics", "where Prometheus scrapes; empty for none")
	healthPath := fs.String("health", "/healthz", "the health endpoint")
	if err := fs.Parse(args); err != nil {
		return err
	}
	target, err := url.Parse(*upstream)
	if err != nil || target.Scheme == "" || target.Host == "" {
		return fmt.Errorf("-upstream %q: want an absolute URL such as http://127.0.0.1:9000", *upstream)
	}
	proxies, err := httpkey.ParseTrustedProxies(*trusted)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(out, nil))

	// Rules first: a bad file should stop the gateway before anything starts.
	var current func() *rules.Rules
	if *rulesFile != "" {
		w, err := rules.Watch(ctx, *rulesFile, rules.WatchOptions{
			Env:      os.LookupEnv,
			OnChange: func(*rules.Rules) { log.Info("rules reloaded", "file", *rulesFile) },
			OnError:  func(err error) { log.Error("rules not reloaded: keeping the old ones", "err", err) },
		})
		if err != nil {
			return err
		}
		defer w.Close()
		current = w.Current
	} else {
		cfg, err := rules.FromEnv(os.LookupEnv)
		if err != nil {
			return err
		}
		rs, err := rules.Compile(cfg)
		if err != nil {
			return err
		}
		current = middleware.StaticRules(rs)
	}

	// The metrics recorder comes before the limiter: New runs the first round.
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		return err
	}
	var client redis.UniversalClient
	if *addr != "" {
		client = redis.NewClient(&redis.Options{Addr: *addr})
		defer client.Close()
	}
	lim, err := hybrid.New(hybrid.Config{Redis: client, Mode: *mode, Prefix: "gw:", Logger: log, OnRound: rec.ObserveRound})
	if err != nil {
		return err
	}
	if err := rec.Watch(lim); err != nil {
		return err
	}
	resolver := httpkey.IPResolver{TrustedProxies: proxies, Header: httpkey.XForwardedForOnly}
	mw, err := middleware.New(middleware.Config{Limiter: lim, Rules: current, IP: resolver, Observer: rec, Logger: log})
	if err != nil {
		_ = lim.Close(context.Background())
		return err
	}

	mux := http.NewServeMux()
	if *metricsPath != "" {
		mux.Handle(*metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc(*healthPath, func(w http.ResponseWriter, _ *http.Request) {
		status := "ok"
		if lim.Degraded() {
			status = "degraded" // still serving, on the fallback
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"status": status, "mode": lim.Mode().String()})
	})
	mux.Handle("/", mw(httputil.NewSingleHostReverseProxy(target)))

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = lim.Close(context.Background())
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "gateway listening on http://%s, proxying to %s (%s mode)\n", ln.Addr(), target, lim.Mode())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err = <-served:
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = srv.Shutdown(shutdown)
		cancel()
	}
	closing, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cerr := lim.Close(closing); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
