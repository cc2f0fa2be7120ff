package metrics

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/sync/round"
)

// The label names.
const (
	labelResult = "result"
	labelRule   = "rule"
	labelSource = "source"
	labelClient = "client_id" // the name the common "top limited clients" query uses
)

// Values of the result label of rate_limit_requests_total, one per
// observe.Outcome, and of rate_limit_checks_total (the first three).
const (
	resultAllowed       = "allowed"
	resultLimited       = "limited"
	resultShadowLimited = "shadow_limited"
	resultBanned        = "banned"
	resultUnavailable   = "unavailable"
	resultFailed        = "failed"
	resultUnknown       = "unknown" // an Outcome or Source this package does not know
)

// Values of the result label of the sync round histograms.
const (
	roundOK      = "ok"      // the round reached Redis and came back
	roundError   = "error"   // it failed: a timeout, a connection error, a Redis error
	roundRefused = "refused" // the breaker refused it (open, or too many calls in flight): Redis was not called
)

// Source indexes: hybrid.Source's values, then one for any other.
const (
	numSources    = 4
	sourceUnknown = numSources - 1
)

// sourceIndex maps a decision's source to its index.
func sourceIndex(s hybrid.Source) int {
	switch s {
	case hybrid.Local, hybrid.Remote, hybrid.Degraded:
		return int(s)
	}
	return sourceUnknown
}

// sourceName is the source label value of index i.
func sourceName(i int) string {
	switch i {
	case int(hybrid.Local):
		return "local"
	case int(hybrid.Remote):
		return "remote"
	case int(hybrid.Degraded):
		return "degraded"
	}
	return resultUnknown
}

// Check result indexes.
const (
	checkAllowed = iota
	checkLimited
	checkShadowLimited
	numCheckResults
)

// checkResultName is the result label value of check result i.
func checkResultName(i int) string {
	switch i {
	case checkAllowed:
		return resultAllowed
	case checkLimited:
		return resultLimited
	}
	return resultShadowLimited
}

// numOutcomes is the number of observe.Outcome values.
const numOutcomes = int(observe.Failed) + 1

// outcomeName is the result label value of request outcome o.
func outcomeName(o observe.Outcome) string {
	switch o {
	case observe.Passed:
		return resultAllowed
	case observe.Limited:
		return resultLimited
	case observe.Banned:
		return resultBanned
	case observe.Unavailable:
		return resultUnavailable
	case observe.ShadowLimited:
		return resultShadowLimited
	case observe.Failed:
		return resultFailed
	}
	return resultUnknown
}

// Recorder records what the middleware and the reconciler do as Prometheus
// metrics. It implements observe.Observer; ObserveRound is a
// hybrid.Config.OnRound hook; Watch adds a limiter's own counters.
//
// Make one with New. A Recorder is itself a prometheus.Collector of its
// event metrics, which New registers: reg.Unregister(rec) removes them.
// All its methods are safe for concurrent use, and ObserveCheck and
// ObserveRequest neither allocate nor take a lock, except the first time a
// rule or a source is seen and, for ObserveRequest, on a Limited request
// (one short lock, for the per-client series).
type Recorder struct {
	reg       prometheus.Registerer
	namespace string
	nearLimit float64
	maxRules  int

	requests       *prometheus.CounterVec
	requestsBy     [numOutcomes]prometheus.Counter // the known outcomes' children
	requestLatency prometheus.Histogram
	exceeded       *prometheus.CounterVec
	checks         *prometheus.CounterVec
	nearLimits     *prometheus.CounterVec
	checkLatency   *prometheus.HistogramVec
	latencyBy      [numSources]atomic.Pointer[prometheus.Observer] // created when first needed
	roundDuration  *prometheus.HistogramVec
	roundKeys      *prometheus.HistogramVec
	clients        *topClients // nil when Options.TopClients < 0

	// rules maps a rule name to its series. Copied on write: a rule is added
	// once, looked up on every event.
	rules     atomic.Pointer[map[string]*ruleSeries]
	rulesMu   sync.Mutex // serializes writers of rules
	rulesFull atomic.Bool
	overflow  *ruleSeries // the OverflowRule's series, made when rulesFull is set
}

// ruleSeries are the series of one rule.
type ruleSeries struct {
	label    string // the rule label value
	exceeded prometheus.Counter
	near     prometheus.Counter
	sources  [numSources]atomic.Pointer[sourceSeries] // created when first needed
}

// sourceSeries are the checks_total series of one rule and one source: all
// three results are created together, so a count starts from an exported
// zero and rate() sees its first increment.
type sourceSeries struct {
	results [numCheckResults]prometheus.Counter
}

// New returns a Recorder of the metrics opts describes, registered on reg.
// reg must not be nil: a Recorder never falls back to the global registry
// (pass prometheus.DefaultRegisterer to use it). New returns an error, and
// registers nothing, when opts is invalid or reg refuses the metrics (most
// often: another Recorder with the same namespace is registered there).
func New(reg prometheus.Registerer, opts Options) (*Recorder, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil registerer (pass a prometheus.Registry; the global one is never used by default)")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ns := opts.Namespace
	r := &Recorder{reg: reg, namespace: ns, nearLimit: opts.NearLimit, maxRules: opts.MaxRules}
	r.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "requests_total",
		Help: "Requests the rate-limit middleware handled, by result: allowed, limited (429), shadow_limited (a shadow rule would have limited it; it passed), banned (403), unavailable (limiter degraded and failing closed: 503), failed (could not be checked).",
	}, []string{labelResult})
	for o := range numOutcomes {
		r.requestsBy[o] = r.requests.WithLabelValues(outcomeName(observe.Outcome(o)))
	}
	r.requestLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "request_duration_seconds",
		Help:    "Time each request spent in the rate-limit middleware before its handler ran (or it was answered), in seconds.",
		Buckets: opts.LatencyBuckets,
	})
	r.exceeded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "exceeded_total",
		Help: "Requests rejected with 429 because a rule's limit was exceeded, by the rule that rejected them. Equals requests_total{result=\"limited\"} summed over rules.",
	}, []string{labelRule})
	r.checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "checks_total",
		Help: "Limit checks, by rule, by where the decision was made (local: node memory; remote: Redis; degraded: node memory under the fallback, Redis failing) and by result (allowed, limited, shadow_limited). A request makes one check per rule that applies to it.",
	}, []string{labelRule, labelSource, labelResult})
	r.nearLimits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "near_limit_total",
		Help: fmt.Sprintf("Admitted checks that left less than %g of the limit's capacity remaining, by rule: clients about to be limited.", opts.NearLimit),
	}, []string{labelRule})
	r.checkLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "check_duration_seconds",
		Help:    "Time spent in the limiter for one check, in seconds, by where the decision was made (local, remote, degraded).",
		Buckets: opts.LatencyBuckets,
	}, []string{labelSource})
	r.roundDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "sync_round_duration_seconds",
		Help:    "Duration of each sync round (the round trip to Redis, or the time to fail), in seconds, by result: ok, error, refused (the breaker refused the call: Redis was not called).",
		Buckets: opts.RoundBuckets,
	}, []string{labelResult})
	r.roundKeys = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "sync_round_keys",
		Help:    "Keys reported to Redis in each sync round, by result: ok, error, refused.",
		Buckets: roundKeyBuckets(),
	}, []string{labelResult})
	if opts.TopClients > 0 {
		vec := prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "client_exceeded_total",
			Help: fmt.Sprintf("Requests rejected with 429, by client, for the %d most recently limited clients only: a client's series is deleted when it falls out of them, so sums over client_id undercount exceeded_total.", opts.TopClients),
		}, []string{labelClient})
		r.clients, err = newTopClients(vec, opts.TopClients, opts.ClientLabel, opts.ClientLabelKey)
		if err != nil {
			return nil, err
		}
	}
	empty := map[string]*ruleSeries{}
	r.rules.Store(&empty)

	if err := reg.Register(r); err != nil {
		return nil, fmt.Errorf("metrics: registering the recorder: %w", err)
	}
	return r, nil
}

// collectors are the Recorder's metric vectors and histograms.
func (r *Recorder) collectors(yield func(prometheus.Collector) bool) {
	cs := []prometheus.Collector{r.requests, r.requestLatency, r.exceeded, r.checks, r.nearLimits, r.checkLatency, r.roundDuration, r.roundKeys}
	if r.clients != nil {
		cs = append(cs, r.clients.vec)
	}
	for _, c := range cs {
		if !yield(c) {
			return
		}
	}
}

// Describe implements prometheus.Collector.
func (r *Recorder) Describe(ch chan<- *prometheus.Desc) {
	for c := range r.collectors {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (r *Recorder) Collect(ch chan<- prometheus.Metric) {
	for c := range r.collectors {
		c.Collect(ch)
	}
}

// Watch registers a collector of l's Stats (NewLimiterCollector) on the
// Recorder's registerer, under its namespace. Only one limiter can be
// watched per Recorder: for more, register NewLimiterCollector on
// registerers wrapped with a distinguishing label.
func (r *Recorder) Watch(l *hybrid.Limiter) error {
	if l == nil {
		return errors.New("metrics: watch: nil limiter")
	}
	if err := r.reg.Register(NewLimiterCollector(l, r.namespace)); err != nil {
		return fmt.Errorf("metrics: watch: %w", err)
	}
	return nil
}

// ObserveCheck counts one limit check: checks_total by rule, source and
// result; check_duration_seconds by source; near_limit_total by rule when
// the check was admitted and left less than Options.NearLimit of the
// limit's capacity.
func (r *Recorder) ObserveCheck(ev observe.CheckEvent) {
	src := sourceIndex(ev.Decision.Source)
	rs := r.rule(ev.Rule)
	res := checkAllowed
	if !ev.Decision.Allowed {
		res = checkLimited
		if ev.Shadow {
			res = checkShadowLimited
		}
	}
	rs.source(r, src).results[res].Inc()
	r.latency(src).Observe(seconds(ev.Latency))
	if res == checkAllowed && r.nearLimit > 0 {
		if c := ev.Decision.Limit.Capacity(); c > 0 && float64(ev.Decision.Remaining) < r.nearLimit*float64(c) {
			rs.near.Inc()
		}
	}
}

// ObserveRequest counts one request: requests_total by result,
// request_duration_seconds, and for a Limited request exceeded_total by
// rule and client_exceeded_total by client.
func (r *Recorder) ObserveRequest(ev observe.RequestEvent) {
	if o := int(ev.Outcome); o >= 0 && o < numOutcomes {
		r.requestsBy[o].Inc()
	} else {
		r.requests.WithLabelValues(resultUnknown).Inc()
	}
	r.requestLatency.Observe(seconds(ev.Latency))
	if ev.Outcome == observe.Limited {
		r.rule(ev.Rule).exceeded.Inc()
		if r.clients != nil {
			r.clients.inc(ev.Client)
		}
	}
}

// ObserveRound records one sync round in sync_round_duration_seconds and
// sync_round_keys. Pass it as hybrid.Config.OnRound (it has the signature
// of hybrid.Config.OnRound too): the limiter calls it on its
// reconciler's goroutine after every round, the first inside hybrid.New.
func (r *Recorder) ObserveRound(info round.Info) {
	res := roundOK
	switch {
	case info.Err == nil:
	case errors.Is(info.Err, breaker.ErrOpen), errors.Is(info.Err, breaker.ErrBusy):
		res = roundRefused
	default:
		res = roundError
	}
	r.roundDuration.WithLabelValues(res).Observe(seconds(info.Duration))
	r.roundKeys.WithLabelValues(res).Observe(float64(max(info.Keys, 0)))
}

// latency is the check latency histogram of source index src.
func (r *Recorder) latency(src int) prometheus.Observer {
	if o := r.latencyBy[src].Load(); o != nil {
		return *o
	}
	o := r.checkLatency.WithLabelValues(sourceName(src)) // the same child whoever asks first
	r.latencyBy[src].Store(&o)
	return o
}

// rule returns the series of the rule named name.
func (r *Recorder) rule(name string) *ruleSeries {
	if rs, ok := (*r.rules.Load())[name]; ok {
		return rs
	}
	if r.rulesFull.Load() {
		return r.overflow
	}
	return r.addRule(name)
}

// addRule makes the series of a rule not seen before, or returns the
// overflow series once MaxRules rules have theirs.
func (r *Recorder) addRule(name string) *ruleSeries {
	r.rulesMu.Lock()
	defer r.rulesMu.Unlock()
	old := *r.rules.Load()
	if rs, ok := old[name]; ok {
		return rs
	}
	if len(old) >= r.maxRules {
		if r.overflow == nil {
			r.overflow = r.newRuleSeries(OverflowRule)
			r.rulesFull.Store(true) // after overflow is set: rule reads it once it sees rulesFull
		}
		return r.overflow
	}
	rs := r.newRuleSeries(name)
	m := make(map[string]*ruleSeries, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[strings.Clone(name)] = rs
	r.rules.Store(&m)
	return rs
}

// newRuleSeries makes the series of the rule named name.
func (r *Recorder) newRuleSeries(name string) *ruleSeries {
	label := labelValue(name)
	return &ruleSeries{label: label, exceeded: r.exceeded.WithLabelValues(label), near: r.nearLimits.WithLabelValues(label)}
}

// source returns rs's checks_total series of source index src.
func (rs *ruleSeries) source(r *Recorder, src int) *sourceSeries {
	if s := rs.sources[src].Load(); s != nil {
		return s
	}
	s := new(sourceSeries)
	for i := range s.results {
		s.results[i] = r.checks.WithLabelValues(rs.label, sourceName(src), checkResultName(i))
	}
	if rs.sources[src].CompareAndSwap(nil, s) {
		return s
	}
	return rs.sources[src].Load() // the same children, made by another goroutine
}

// labelValue is s as a label value: Prometheus needs valid UTF-8, and
// refuses (or, from WithLabelValues, panics on) anything else.
func labelValue(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}

// seconds is d in seconds, never negative.
func seconds(d time.Duration) float64 {
	return max(d, 0).Seconds()
}
