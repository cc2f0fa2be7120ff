package envoyrls

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hybridlimit/hybridlimit/envoyrls/config"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/observe"
)

// Headers names the response headers the service asks Envoy to add, with
// the limit, the remaining requests and the seconds until the window resets
// of the descriptor closest to its limit (envoyproxy/ratelimit's
// LIMIT_RESPONSE_HEADERS_ENABLED). The zero value adds none.
type Headers struct {
	Limit, Remaining, Reset string
}

// DefaultHeaders are envoyproxy/ratelimit's default header names.
var DefaultHeaders = Headers{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}

// Config configures a Service. Limiter and Rules are required; the zero
// value of every other field is the default.
type Config struct {
	// Limiter decides every descriptor. The service never closes it.
	Limiter *hybrid.Limiter
	// Rules returns the configuration in force; it is called once per
	// request, so a reload takes effect between two requests, never within
	// one. config.Watcher.Current fits. While it returns nil (no
	// configuration has loaded yet) every call is answered Unavailable, as
	// envoyproxy/ratelimit answers with an error then.
	Rules func() *config.Config
	// Observer is told of each descriptor's decision and of each request
	// (metrics.Recorder fits): the check's rule label is the rule's metric
	// name, the request's client is the limited descriptor. Nil means
	// none.
	Observer observe.Observer
	// Logger receives the requests the service refuses, at debug level.
	// Nil means slog.Default().
	Logger *slog.Logger
	// ShadowMode never answers OVER_LIMIT overall, while deciding and
	// counting as usual (envoyproxy/ratelimit's SHADOW_MODE).
	ShadowMode bool
	// QuotaMode answers OK for every descriptor over its limit, as if each
	// rule had quota_mode (envoyproxy/ratelimit's QUOTA_MODE).
	QuotaMode bool
	// Headers, when set, are added to every response that matched a limit.
	Headers Headers
	// MaxKeyBytes bounds the memory one counter takes for its name: a
	// counter whose name (domain, descriptor keys and values, unit) is
	// longer is counted under a digest of the name (SHA-256, 24 bytes),
	// so descriptor values of any length (a path, a header) cost the same,
	// and each distinct value still counts apart. Such counters are counted
	// (LongKeys) and the first is logged. Zero means DefaultMaxKeyBytes;
	// it must be at least 32.
	MaxKeyBytes int

	// Redis, when set, holds the count of every rule without an algorithm
	// as envoyproxy/ratelimit holds it: the hits of each descriptor value
	// in each window, admitted or not, under envoyproxy/ratelimit's key
	// (Prefix, then "domain_key_value_..._", then the window's start in
	// Unix seconds; a name longer than MaxKeyBytes as a digest of it),
	// whatever the limit. Each replica sends its hits every SyncInterval,
	// in one pipeline, and learns the fleet's count from the answers;
	// the first call for a key in a window that the replica did not hold
	// in the window before sends its own hits at once and learns the
	// count from the answer, waiting at most CountReadWait. Then
	// limit_remaining is the limit minus the fleet's count as the replica
	// knows it, a restarted replica carries on the window's count, and a
	// reload that changes a limit keeps what was counted: a call that
	// would take the count past the limit is over it, whatever the
	// limiter's share would admit. Nil keeps the counts
	// in this process's memory only (one replica alone is exact so). With
	// Redis set, call Close when done.
	Redis redis.UniversalClient
	// Prefix starts the count keys in Redis (envoyproxy/ratelimit's
	// CACHE_KEY_PREFIX); the empty string is a prefix too.
	Prefix string
	// SyncInterval is how often the counts are sent to Redis. Zero means
	// hybrid.DefaultSyncInterval.
	SyncInterval time.Duration
	// CountReadWait bounds the wait of a key's first call in a window
	// that is new to the replica for the fleet's count (the answer to the
	// hits it sends); past it the call goes on with what the replica
	// knows, and the answer is taken when it comes. Zero means
	// DefaultCountReadWait.
	CountReadWait time.Duration
	// MaxCounts bounds the (key, window) counts held in memory; beyond,
	// a call is decided by the limiter alone. Zero means 100,000.
	MaxCounts int
}

// DefaultCountReadWait is Config.CountReadWait's default: well under the
// 20 ms Envoy gives a call.
const DefaultCountReadWait = 5 * time.Millisecond

// DefaultMaxKeyBytes is Config.MaxKeyBytes's default: longer counter names
// are counted under a digest.
const DefaultMaxKeyBytes = 256

// Service answers RLS v3's ShouldRateLimit. Make one with New. It is safe
// for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	lim   *hybrid.Limiter
	rules func() *config.Config
	obs   observe.Observer
	log   *slog.Logger
	cfg   Config

	counts   *counts
	longKeys atomic.Uint64 // counters counted under a digest of their name
}

// New returns a Service configured by cfg.
func New(cfg Config) (*Service, error) {
	switch {
	case cfg.Limiter == nil:
		return nil, errors.New("envoyrls: Config.Limiter is nil")
	case cfg.Rules == nil:
		return nil, errors.New("envoyrls: Config.Rules is nil")
	case cfg.MaxKeyBytes < 0 || cfg.MaxKeyBytes > 0 && cfg.MaxKeyBytes < 32:
		return nil, fmt.Errorf("envoyrls: Config.MaxKeyBytes %d: want 0 (the default, %d) or at least 32", cfg.MaxKeyBytes, DefaultMaxKeyBytes)
	case cfg.SyncInterval < 0 || cfg.CountReadWait < 0 || cfg.MaxCounts < 0:
		return nil, fmt.Errorf("envoyrls: Config.SyncInterval %v, CountReadWait %v, MaxCounts %d: want zero (the default) or positive", cfg.SyncInterval, cfg.CountReadWait, cfg.MaxCounts)
	}
	if cfg.MaxKeyBytes == 0 {
		cfg.MaxKeyBytes = DefaultMaxKeyBytes
	}
	h := cfg.Headers
	if (h.Limit == "" || h.Remaining == "" || h.Reset == "") && h != (Headers{}) {
		return nil, fmt.Errorf("envoyrls: Config.Headers needs all three names, got Limit %q, Remaining %q, Reset %q", h.Limit, h.Remaining, h.Reset)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	lim := cfg.Limiter
	cts := newCounts(cfg.Redis, cfg.Prefix, cmp.Or(cfg.SyncInterval, hybrid.DefaultSyncInterval), cmp.Or(cfg.CountReadWait, DefaultCountReadWait),
		cmp.Or(cfg.MaxCounts, 100_000), lim.Degraded, lim.Now, log)
	return &Service{lim: lim, rules: cfg.Rules, obs: cfg.Observer, log: log, cfg: cfg, counts: cts}, nil
}

// Close sends the counts not yet sent to Redis (Config.Redis), within ctx,
// and stops sending them. Calls after it are still answered, their counts
// kept in memory only. Without Config.Redis it does nothing.
func (s *Service) Close(ctx context.Context) error {
	s.counts.close(ctx)
	return ctx.Err()
}

// CountStats are the counts' work since the service started: reads of a
// key's count by a call (and those that failed or timed out), (key,
// window)s sent to Redis by the flushes (and the flushes that failed), and
// calls whose count was not kept (Config.MaxCounts held).
type CountStats struct {
	Reads, ReadsFailed, Sent, FlushesFailed, Untracked uint64
}

// CountStats returns the counts' work so far.
func (s *Service) CountStats() CountStats {
	c := s.counts
	return CountStats{Reads: c.reads.Load(), ReadsFailed: c.readsFailed.Load(), Sent: c.flushed.Load(), FlushesFailed: c.flushesFailed.Load(), Untracked: c.untracked.Load()}
}

// verdict is the decision on one descriptor.
type verdict struct {
	rule    *config.Rule
	metric  string
	counter string
	hits    uint64
	st      *rlsv3.RateLimitResponse_DescriptorStatus
	over    bool // over its limit (whatever shadow or quota mode answer)
}

// LongKeys returns how many times a counter was counted under a digest of
// its name, its name being longer than Config.MaxKeyBytes.
func (s *Service) LongKeys() uint64 { return s.longKeys.Load() }

// Ready reports whether the service has a configuration to answer from.
func (s *Service) Ready() bool { return s.rules() != nil }

// ShouldRateLimit decides every descriptor of req and answers with the
// overall code (OVER_LIMIT when any descriptor outside shadow and quota
// mode is over its limit) and one status per descriptor, in order.
//
// It returns an InvalidArgument error for an empty domain, no
// descriptors, or a descriptor carrying a limit of unknown unit; and
// Unavailable while no configuration has loaded, and once the limiter is
// closed. Redis trouble is never an error: the limiter decides from
// memory.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	resp, limitedBy, client, err := s.decide(ctx, req)
	if s.obs != nil {
		ev := observe.RequestEvent{Outcome: observe.Passed, Latency: time.Since(start)}
		switch {
		case err != nil:
			ev.Outcome = observe.Failed
		case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
			ev.Outcome, ev.Rule, ev.Client = observe.Limited, limitedBy, client
		case limitedBy != "":
			ev.Outcome, ev.Rule = observe.ShadowLimited, limitedBy
		}
		s.obs.ObserveRequest(ev)
	}
	if err != nil {
		s.log.Debug("envoyrls: request refused", "domain", req.GetDomain(), "err", err)
		return nil, err
	}
	return resp, nil
}

// decide is ShouldRateLimit's work. It returns the metric name of the first
// rule over its limit, and the descriptor that was, if any.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, limitedBy, client string, err error) {
	if req.GetDomain() == "" {
		return nil, "", "", status.Error(codes.InvalidArgument, "envoyrls: rate limit domain must not be empty")
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, "", "", status.Error(codes.InvalidArgument, "envoyrls: rate limit descriptor list must not be empty")
	}
	cfg := s.rules()
	if cfg == nil {
		return nil, "", "", status.Error(codes.Unavailable, "envoyrls: no rate limit configuration loaded")
	}
	vs := make([]verdict, len(descs))
	var replaced map[string]bool
	var entries []config.Entry
	for i, d := range descs {
		entries = entries[:0]
		for _, e := range d.GetEntries() {
			entries = append(entries, config.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		v := &vs[i]
		v.hits = hitsOf(req, d)
		if o := d.GetLimit(); o != nil {
			unit := config.Unit(o.GetUnit())
			if !unit.Valid() {
				return nil, "", "", status.Errorf(codes.InvalidArgument, "envoyrls: descriptor %d carries a limit of unknown unit %v", i, o.GetUnit())
			}
			v.rule = overrideRule(req.GetDomain(), entries, o.GetRequestsPerUnit(), unit)
			v.metric, v.counter = v.rule.Key, config.CounterKey(req.GetDomain(), entries)
			continue
		}
		m, ok := cfg.Lookup(req.GetDomain(), entries)
		if !ok {
			continue
		}
		v.rule, v.metric, v.counter = m.Rule, m.Metric, m.Counter
		for _, r := range m.Rule.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
	}
	resp = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs))}
	now := s.lim.Now()
	var closest *rlsv3.RateLimitResponse_DescriptorStatus // for the headers
	closestRemaining := uint32(math.MaxUint32)
	for i := range vs {
		v := &vs[i]
		if v.rule != nil && !v.rule.Unlimited && v.rule.Name != "" && replaced[v.rule.Name] {
			v.rule = nil
		}
		switch {
		case v.rule == nil:
			v.st = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		case v.rule.Unlimited:
			v.st = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		default:
			if err := s.limit(ctx, v, now); err != nil {
				return nil, "", "", err
			}
		}
		st := v.st
		if s.cfg.Headers != (Headers{}) && st.CurrentLimit != nil && st.LimitRemaining < closestRemaining {
			closest, closestRemaining = st, st.LimitRemaining
		}
		if !v.over {
			continue
		}
		switch {
		case s.cfg.QuotaMode || v.rule.QuotaMode:
			// Reported, never enforced: OK, without a reset.
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: st.CurrentLimit, LimitRemaining: st.LimitRemaining}
			if limitedBy == "" {
				limitedBy = v.metric
			}
			continue
		case v.rule.ShadowMode:
			st.Code = rlsv3.RateLimitResponse_OK
			if limitedBy == "" {
				limitedBy = v.metric
			}
		default:
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if client == "" {
				limitedBy, client = v.metric, config.DescriptorKey(req.GetDomain(), entriesOf(descs[i]))
			}
			if s.cfg.Headers != (Headers{}) {
				closest, closestRemaining = st, 0
			}
		}
		resp.Statuses[i] = st
	}
	for i := range vs {
		if resp.Statuses[i] == nil {
			resp.Statuses[i] = vs[i].st
		}
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && s.cfg.ShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		client = ""
	}
	if closest != nil {
		h := s.cfg.Headers
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: h.Limit, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: h.Remaining, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: h.Reset, Value: strconv.FormatInt(windowReset(config.Unit(closest.CurrentLimit.Unit), now).GetSeconds(), 10)},
		}
	}
	return resp, limitedBy, client, nil
}

// hitsOf is how much a descriptor spends: its own hits_addend when set
// (zero then checks without spending), else the request's, where zero
// means one.
func hitsOf(req *rlsv3.RateLimitRequest, d *commonv3.RateLimitDescriptor) uint64 {
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	return max(uint64(req.GetHitsAddend()), 1)
}

func entriesOf(d *commonv3.RateLimitDescriptor) []config.Entry {
	es := make([]config.Entry, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		es[i] = config.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	return es
}

// overrideRule is the rule of a descriptor that carries its own limit:
// envoyproxy/ratelimit's fixed window, never in shadow mode.
func overrideRule(domain string, entries []config.Entry, rpu uint32, unit config.Unit) *config.Rule {
	r := &config.Rule{Key: config.DescriptorKey(domain, entries), RequestsPerUnit: rpu, Unit: unit, EnvoyCounting: true}
	if rpu > 0 {
		r.Limit = limit.Limit{Rate: int64(rpu), Period: unit.Period(), Algorithm: limit.FixedWindow}
	}
	return r
}

// windowReset is envoyproxy/ratelimit's duration until reset: the whole
// seconds until the unit's current window ends, counted on the limiter's
// clock (Redis server time), from 1 to the unit's length.
func windowReset(unit config.Unit, now time.Time) *durationpb.Duration {
	secs := unit.Seconds()
	if secs == 0 {
		return nil
	}
	return &durationpb.Duration{Seconds: secs - now.Unix()%secs}
}

// limit decides v, whose rule limits, into v.st and v.over.
func (s *Service) limit(ctx context.Context, v *verdict, now time.Time) error {
	r := v.rule
	v.st = &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:         rlsv3.RateLimitResponse_OK,
		CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: rlsv3.RateLimitResponse_RateLimit_Unit(r.Unit)},
	}
	start := time.Now()
	var (
		d   hybrid.Decision
		err error
	)
	if r.EnvoyCounting {
		d, err = s.envoyCount(ctx, v, now)
		v.st.DurationUntilReset = windowReset(r.Unit, now)
	} else {
		// Denied: how long until the request would pass (what a client
		// retries after); admitted: how long until the key is fresh again.
		d, err = s.algorithm(ctx, v)
		if reset := d.ResetAfter; d.Allowed && reset > 0 {
			v.st.DurationUntilReset = durationpb.New(reset)
		} else if !d.Allowed && d.RetryAfter > 0 {
			v.st.DurationUntilReset = durationpb.New(d.RetryAfter)
		}
	}
	if err != nil {
		return decisionError(err)
	}
	v.over = !d.Allowed
	if v.over {
		v.st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	} else {
		v.st.LimitRemaining = uint32(min(d.Remaining, math.MaxUint32))
	}
	if s.obs != nil {
		s.obs.ObserveCheck(observe.CheckEvent{Rule: v.metric, Decision: d, Shadow: r.ShadowMode || r.QuotaMode || s.cfg.QuotaMode, Latency: time.Since(start)})
	}
	return nil
}

// decisionError turns a limiter's error into the gRPC status Envoy sees.
func decisionError(err error) error {
	if errors.Is(err, hybrid.ErrClosed) {
		return status.Error(codes.Unavailable, "envoyrls: the limiter is closed (shutting down)")
	}
	return status.Errorf(codes.InvalidArgument, "envoyrls: %v", err)
}

// counterKey is the limiter's key of a rule's count: the descriptor's
// counter, then the unit (and algorithm), so that one descriptor limited
// per second and per minute counts apart, as in envoyproxy/ratelimit; a
// name longer than MaxKeyBytes is replaced by its digest.
func (s *Service) counterKey(v *verdict) string {
	r := v.rule
	key := v.counter + "@" + r.Unit.String()
	if !r.EnvoyCounting {
		key += "/" + r.Limit.Algorithm.String()
	}
	if len(key) <= s.cfg.MaxKeyBytes {
		return key
	}
	if s.longKeys.Add(1) == 1 {
		s.log.Warn("envoyrls: a counter name is longer than the bound: such counters are counted under a digest of their name (each distinct name still counts apart; counted in rate_limit_long_keys_total; logged once)",
			"bytes", len(key), "max_key_bytes", s.cfg.MaxKeyBytes, "rule", v.metric)
	}
	return digestKey(key)
}

// countName is the name of a rule's count in Redis, without the prefix
// and the window: envoyproxy/ratelimit's "domain_key_value_..._", or, for
// a name longer than MaxKeyBytes, "#" and a digest of it, then "_".
func (s *Service) countName(v *verdict) string {
	if len(v.counter) <= s.cfg.MaxKeyBytes {
		return v.counter
	}
	return digestKey(v.counter) + "_"
}

// digestKey is the name a long counter is counted under: "#" and 18 bytes
// of its SHA-256, in unpadded base64 (25 bytes in all).
func digestKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:18])
}

// overKey marks a count that went over its limit in the current window.
func overKey(counter string) string { return counter + "!over" }

// markRate is the rate of a rule's "gone over" mark: any spend on the mark
// in a window marks that window, seen as ResetAfter > 0 (the window holds
// spend). Its rate is large so that a mark of weight 1 always fits a node's
// share: a mark of rate 1 is heavier than any share of a fleet of two or
// more, and in Async mode every denied request went to Redis to mark it,
// waiting on Redis (p99 191 ms with a hot key over 4 instances).
const markRate = 1 << 30

// marked reports whether a check of the mark found its window marked.
func marked(m hybrid.Decision) bool { return m.ResetAfter > 0 }

// envoyCount decides a rule without an algorithm as envoyproxy/ratelimit
// does: a counter per window to which every request adds its hits, admitted
// or not, and a request admitted when the counter after it is within the
// limit. The limiter's fixed window admits a request only when it fits and
// never counts past the limit, so a denied request spends what remains of
// the window (no later request fits either, as none would there), and marks
// the window as gone over, which is what a check of zero hits sees there.
//
// The count of the window (counts) is kept beside the limiter's state: a
// call that takes it past the limit is over, whatever the limiter's share
// would admit (after a restart, or a reload that changed the limit, the
// limiter starts afresh while the count carries on), and an admitted
// call's remaining is the limit minus that count.
func (s *Service) envoyCount(ctx context.Context, v *verdict, now time.Time) (hybrid.Decision, error) {
	r := v.rule
	key := s.counterKey(v)
	rate := int64(r.RequestsPerUnit)
	known, counted := s.counts.add(ctx, key, s.countName(v), r.Unit.Seconds(), now, int64(min(v.hits, math.MaxInt64)))
	fleetOver := counted && known > rate
	fleet := func(d hybrid.Decision, err error) (hybrid.Decision, error) {
		if counted && d.Allowed {
			d.Remaining = max(0, rate-known)
		}
		return d, err
	}
	mark := limit.Limit{Rate: markRate, Period: r.Unit.Period(), Algorithm: limit.FixedWindow}
	if v.hits == 0 { // a check: over once the counter went past the limit
		m, err := s.lim.AllowN(ctx, overKey(key), mark, 0)
		if err != nil {
			return m, err
		}
		if marked(m) || fleetOver {
			m.Allowed, m.Remaining, m.Result.Limit = false, 0, r.Limit
			return m, nil
		}
		if r.Limit.Rate == 0 {
			m.Remaining, m.Result.Limit = 0, r.Limit
			return m, nil
		}
		return fleet(s.lim.AllowN(ctx, key, r.Limit, 0))
	}
	var d hybrid.Decision
	var err error
	if r.Limit.Rate > 0 {
		if v.hits <= uint64(r.Limit.Rate) && !fleetOver {
			d, err = s.lim.AllowN(ctx, key, r.Limit, int64(v.hits))
		} else {
			d, err = s.lim.AllowN(ctx, key, r.Limit, 0)
			d.Allowed = false
		}
		if err != nil || d.Allowed {
			return fleet(d, err)
		}
		if counted && !fleetOver && s.lim.Mode() == hybrid.Async {
			// The fleet's count, as this replica knows it, holds this
			// call: in Async mode the denial may be the limiter's alone
			// (this replica's share short, its ask for room answered after
			// AskWait), where envoyproxy/ratelimit admits. Nothing is spent
			// on it, nor marked: the count ends the window once it passes
			// the limit, on every replica within an interval. (Sync and
			// LocalOnly decide exactly: their denial is the window's end,
			// whatever a count that lags the other replicas' hits says.)
			d.Remaining, d.Result.Limit = 0, r.Limit
			return d, nil
		}
		if err := s.spendRest(ctx, key, r.Limit, d.Remaining, r.Unit.Seconds(), windowStart(now, r.Unit.Seconds())); err != nil {
			return d, err
		}
	}
	m, err := s.lim.AllowN(ctx, overKey(key), mark, 1)
	if err != nil {
		return m, err
	}
	d.Source = m.Source
	d.Allowed, d.Remaining, d.Result.Limit = false, 0, r.Limit
	return d, nil
}

// spendRest spends what remains of key's window (the window starting at
// window, Unix seconds, secs long) after a denial that went over the limit:
// no later request fits in the window. In memory a share of the limit may
// refuse the whole remainder; a few halvings find what it takes.
//
// In Async mode it spends only what this instance holds, never waiting for
// the fleet: the fleet's count (counts) refuses the window's later calls on
// every instance, and asking the pool for the remainder held a denied call
// up to AskWait an ask, so that the halvings ran past the window's end and
// spent the next window's room (with 4 replicas offered twice a 500/s limit
// round-robin, whole seconds admitted under 40). It stops at the window's
// end, whatever the mode.
func (s *Service) spendRest(ctx context.Context, key string, lim limit.Limit, left, secs, window int64) error {
	if s.lim.Mode() == hybrid.Async {
		// A deadline already passed: the limiter decides in this
		// instance's share and asks nobody (Config.AskWait: ctx bounds
		// the wait).
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Time{})
		defer cancel()
	}
	for tries := 0; left > 0 && tries < 8; tries++ {
		if windowStart(s.lim.Now(), secs) != window {
			return nil
		}
		e, err := s.lim.AllowN(ctx, key, lim, left)
		if err != nil {
			return err
		}
		if e.Allowed {
			left = e.Remaining
			continue
		}
		left /= 2
	}
	return nil
}

// algorithm decides a rule with an algorithm of its own: a denied request
// spends nothing, and one heavier than the limit can ever admit is denied.
func (s *Service) algorithm(ctx context.Context, v *verdict) (hybrid.Decision, error) {
	r := v.rule
	if r.Limit.Rate == 0 {
		return hybrid.Decision{Result: limit.Result{Limit: r.Limit}}, nil
	}
	key := s.counterKey(v)
	if v.hits > uint64(r.Limit.Capacity()) {
		d, err := s.lim.AllowN(ctx, key, r.Limit, 0)
		d.Allowed = false
		return d, err
	}
	return s.lim.AllowN(ctx, key, r.Limit, int64(v.hits))
}
