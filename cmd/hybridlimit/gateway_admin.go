package main

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/upstream"
)

// gatewayState is what the admin endpoints report on.
type gatewayState struct {
	lim                 *hybrid.Limiter
	proxy               *upstream.Proxy
	unreadyWhenDegraded bool
	draining            atomic.Bool // set at shutdown: readiness answers 503
}

// adminMux serves metrics, liveness and readiness.
func (g *gatewayState) adminMux(o *gatewayOptions, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	if o.metricsPath != "" {
		mux.Handle(o.metricsPath, metricsHandler(reg))
	}
	mux.HandleFunc(o.healthPath, func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusOK, map[string]string{"status": g.status(), "mode": g.lim.Mode().String()})
	})
	mux.HandleFunc(o.readyPath, func(w http.ResponseWriter, _ *http.Request) {
		ready, body := g.readiness()
		code := http.StatusOK
		if !ready {
			code = http.StatusServiceUnavailable
		}
		writeStatus(w, code, body)
	})
	return mux
}

// status is "draining", "degraded" (deciding on the fallback: Redis is
// down) or "ok".
func (g *gatewayState) status() string {
	switch {
	case g.draining.Load():
		return "draining"
	case g.lim.Degraded():
		return "degraded"
	}
	return "ok"
}

// readiness tells a load balancer whether to send this gateway traffic.
// Not ready: while draining at shutdown, and while degraded if the
// fallback refuses every request (fail-closed) or -unready-when-degraded
// says so. A degraded gateway on the conservative or fail-open fallback
// stays ready: Redis being down usually takes down every gateway at once,
// and taking them all out of rotation would turn a degraded limit into an
// outage. The body says what a load balancer or an operator needs to
// know either way.
func (g *gatewayState) readiness() (bool, map[string]any) {
	status := g.status()
	body := map[string]any{
		"status":   status,
		"mode":     g.lim.Mode().String(),
		"fallback": g.lim.Fallback().String(),
		"upstream": g.proxy.State().String(),
	}
	if g.lim.Mode() != hybrid.LocalOnly {
		body["redis"] = "ok"
		if g.lim.Degraded() {
			body["redis"] = "unreachable"
		}
	}
	reason := ""
	switch {
	case status == "draining":
		reason = "shutting down"
	case status == "degraded" && g.lim.Fallback() == hybrid.FailClosed:
		reason = "Redis is unreachable and the fallback is fail-closed: every request would be refused"
	case status == "degraded" && g.unreadyWhenDegraded:
		reason = "Redis is unreachable (-unready-when-degraded)"
	}
	body["ready"] = reason == ""
	if reason != "" {
		body["reason"] = reason
	}
	return reason == "", body
}

func writeStatus(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// gatewayCollector exports the upstream's counters and breaker state,
// read from upstream.Proxy.Stats at scrape time.
type gatewayCollector struct {
	proxy                                                                 *upstream.Proxy
	forwarded, failures, timeouts, rejected, tooLarge, state, transitions *prometheus.Desc
}

func newGatewayCollector(p *upstream.Proxy) *gatewayCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("gateway_"+name, help, labels, nil)
	}
	return &gatewayCollector{
		proxy:       p,
		forwarded:   d("upstream_requests_total", "Requests forwarded to the upstream."),
		failures:    d("upstream_failures_total", "Forwarded requests that failed: no connection, no answer in time, a failure status, a body cut off."),
		timeouts:    d("upstream_timeouts_total", "Failures that were the upstream not answering in time (also in upstream_failures_total)."),
		rejected:    d("upstream_rejected_total", "Requests answered 503 by the upstream's circuit breaker without being forwarded."),
		tooLarge:    d("request_too_large_total", "Requests answered 413: the body was over -max-body."),
		state:       d("upstream_breaker_state", "1 for the upstream circuit breaker's state (closed, half-open, open), 0 for the others.", "state"),
		transitions: d("upstream_breaker_transitions_total", "Transitions of the upstream circuit breaker, by the state entered.", "to"),
	}
}

func (c *gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.forwarded, c.failures, c.timeouts, c.rejected, c.tooLarge, c.state, c.transitions} {
		ch <- d
	}
}

func (c *gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.proxy.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.forwarded, s.Forwarded)
	counter(c.failures, s.Failures)
	counter(c.timeouts, s.Timeouts)
	counter(c.rejected, s.Rejected)
	counter(c.tooLarge, s.TooLarge)
	for _, st := range []upstream.State{upstream.Closed, upstream.HalfOpen, upstream.Open} {
		v := 0.0
		if s.State == st {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, st.String())
		counter(c.transitions, s.Transitions[st], st.String())
	}
}
