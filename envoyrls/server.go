package envoyrls

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hybridlimit/hybridlimit/envoyrls/config"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// HealthServices are the names the gRPC health service reports on: the
// server as a whole (""), the rate limit service by its full name, and
// "ratelimit", the name envoyproxy/ratelimit reports under.
var HealthServices = []string{"", rlsv3.RateLimitService_ServiceDesc.ServiceName, "ratelimit"}

// NewServer returns a gRPC server, built with opts, serving svc and the
// gRPC health service (grpc.health.v1) under every name in
// HealthServices: NOT_SERVING while svc has no configuration to answer
// from (call SetServing once one loads), SERVING with one. While Redis is
// down the health stays SERVING: the service still answers, from memory.
// On shutdown call the health server's Shutdown first, so that probes turn
// away new callers while the server drains.
func NewServer(svc *Service, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	srv := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	hs := health.NewServer()
	SetServing(hs, svc.Ready())
	healthpb.RegisterHealthServer(srv, hs)
	return srv, hs
}

// SetServing sets every name in HealthServices to SERVING, or to
// NOT_SERVING. After hs.Shutdown it changes nothing: a server draining
// stays NOT_SERVING.
func SetServing(hs *health.Server, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range HealthServices {
		hs.SetServingStatus(name, st)
	}
}

// AdminConfig configures AdminHandler. Limiter and Rules are required.
type AdminConfig struct {
	// Gatherer is what /metrics serves; nil means no /metrics.
	Gatherer prometheus.Gatherer
	// Limiter is reported on by /healthz: its mode and whether it is
	// degraded.
	Limiter *hybrid.Limiter
	// Rules returns the configuration in force, whose domains /healthz
	// lists; nil while none has loaded.
	Rules func() *config.Config
	// Draining, when set and returning true, turns /healthz to 503: the
	// server is shutting down.
	Draining func() bool
}

// AdminHandler serves, for probes and scrapers, on a listener apart from
// the gRPC one (envoyproxy/ratelimit's HOST and PORT):
//
//   - /metrics: Prometheus metrics;
//   - /healthz (and /healthcheck, envoyproxy/ratelimit's path): 200 with
//     {"status":"ok"} or {"status":"degraded"} (Redis is down: the service
//     answers from memory), 503 with {"status":"no configuration"} while no
//     configuration has loaded and {"status":"draining"} during shutdown.
//
// It shows no rule: the rules in force are RulesHandler's, for a listener
// an operator keeps private.
func AdminHandler(cfg AdminConfig) (http.Handler, error) {
	if cfg.Limiter == nil || cfg.Rules == nil {
		return nil, fmt.Errorf("envoyrls: admin handler needs a limiter (%v) and rules (%v)", cfg.Limiter != nil, cfg.Rules != nil)
	}
	mux := http.NewServeMux()
	if cfg.Gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	healthz := func(w http.ResponseWriter, _ *http.Request) {
		st, code := "ok", http.StatusOK
		rules := cfg.Rules()
		domains := []string{}
		if rules != nil {
			domains = rules.Domains()
		}
		switch {
		case cfg.Draining != nil && cfg.Draining():
			st, code = "draining", http.StatusServiceUnavailable
		case rules == nil:
			st, code = "no configuration", http.StatusServiceUnavailable
		case cfg.Limiter.Degraded():
			st = "degraded"
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"status": st, "mode": cfg.Limiter.Mode().String(), "domains": domains,
		})
	}
	mux.HandleFunc("/healthz", healthz)
	mux.HandleFunc("/healthcheck", healthz)
	return mux, nil
}

// RulesHandler serves the rules in force, one a line, as
// envoyproxy/ratelimit's /rlconfig on its debug port shows them; nothing
// while rules returns nil (no configuration has loaded). rules must not
// be nil.
func RulesHandler(rules func() *config.Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if c := rules(); c != nil {
			_, _ = fmt.Fprint(w, c.Dump())
		}
	})
}

// ConfigMetrics counts configuration reloads, for Prometheus: reloads by
// result (ok, error), and the rules and domains in force. Make one with
// NewConfigMetrics; its methods are safe for concurrent use and fit
// config.WatchOptions' OnChange and OnError.
type ConfigMetrics struct {
	reloads *prometheus.CounterVec
	rules   prometheus.Gauge
	domains prometheus.Gauge
}

// NewConfigMetrics registers the configuration's metrics on reg, under
// namespace ("" means "rate_limit"), and sets them from cfg, the
// configuration loaded first (nil: none yet, the gauges at zero).
func NewConfigMetrics(reg prometheus.Registerer, namespace string, cfg *config.Config) (*ConfigMetrics, error) {
	if reg == nil {
		return nil, errors.New("envoyrls: config metrics need a registerer")
	}
	if namespace == "" {
		namespace = "rate_limit"
	}
	m := &ConfigMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "config_reloads_total",
			Help: "Reloads of the rate limit configuration directory, by result: ok (swapped in), error (refused: the configuration in force stays)."}, []string{"result"}),
		rules:   prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "config_rules", Help: "Rate limit rules in the configuration in force."}),
		domains: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "config_domains", Help: "Domains in the configuration in force."}),
	}
	for _, c := range []prometheus.Collector{m.reloads, m.rules, m.domains} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("envoyrls: registering config metrics: %w", err)
		}
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	m.set(cfg)
	return m, nil
}

// Set sets the gauges from cfg, the configuration in force, without
// counting a reload: for the first configuration that loads at start.
func (m *ConfigMetrics) Set(cfg *config.Config) { m.set(cfg) }

// OnChange counts a reload that swapped in cfg.
func (m *ConfigMetrics) OnChange(cfg *config.Config) {
	m.reloads.WithLabelValues("ok").Inc()
	m.set(cfg)
}

// OnError counts a reload that was refused.
func (m *ConfigMetrics) OnError(error) { m.reloads.WithLabelValues("error").Inc() }

func (m *ConfigMetrics) set(cfg *config.Config) {
	if cfg == nil {
		m.rules.Set(0)
		m.domains.Set(0)
		return
	}
	m.rules.Set(float64(cfg.Len()))
	m.domains.Set(float64(len(cfg.Domains())))
}
