package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Interceptors rate-limit the calls of a grpc.Server: Unary and Stream
// return its interceptors. Make one with New; it is safe for concurrent
// use, and both interceptors share its state (the penalty's memory of
// clients).
type Interceptors struct {
	lim        *hybrid.Limiter
	rules      func() *rules.Rules
	ip         httpkey.IPResolver
	client     httpkey.Extractor
	user       func(context.Context) (string, bool)
	tier       func(context.Context, string) string
	priority   func(context.Context, string) bool
	cost       func(context.Context, string, any) int64
	onDenied   func(context.Context, Denial) error
	onError    func(context.Context, string, error) error
	obs        observe.Observer
	log        *slog.Logger
	failClosed bool
	penalties  penalties
}

// New returns the interceptors configured by cfg, or an error naming every
// mistake in cfg.
func New(cfg Config) (*Interceptors, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ic := &Interceptors{
		lim:        cfg.Limiter,
		rules:      cfg.Rules,
		ip:         cfg.IP,
		client:     cfg.Client,
		user:       cfg.User,
		tier:       cfg.Tier,
		priority:   cfg.Priority,
		cost:       cfg.Cost,
		onDenied:   cfg.OnDenied,
		onError:    cfg.OnError,
		obs:        cfg.Observer,
		log:        cfg.Logger,
		failClosed: cfg.Limiter.Fallback() == hybrid.FailClosed,
	}
	ic.ip.TrustedProxies = slices.Clone(cfg.IP.TrustedProxies)
	ic.penalties.maxClients = cfg.PenaltyClients
	if ic.penalties.maxClients == 0 {
		ic.penalties.maxClients = DefaultPenaltyClients
	}
	if ic.client == nil {
		ic.client = httpkey.IP(ic.ip)
	}
	if ic.log == nil {
		ic.log = slog.Default()
	}
	if ic.onDenied == nil {
		ic.onDenied = DefaultOnDenied
	}
	if ic.onError == nil {
		ic.onError = ic.defaultOnError
	}
	return ic, nil
}

// Unary returns the unary server interceptor: each call is checked before
// its handler runs, with Config.Cost given the request message.
func (ic *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := ic.started()
		v := ic.evaluate(ctx, info.FullMethod, req)
		if err := ic.answer(ctx, info.FullMethod, v, start, func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) }); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor: each stream is checked once,
// when it opens, before its handler runs; its messages are not counted.
func (ic *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		start := ic.started()
		v := ic.evaluate(ctx, info.FullMethod, nil)
		if err := ic.answer(ctx, info.FullMethod, v, start, ss.SetTrailer); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// verdict is what the interceptors decided for a call.
type verdict struct {
	outcome  observe.Outcome
	rule     string        // as RequestEvent.Rule
	client   string        // the client key, once known
	wait     time.Duration // the retry delay of a denial
	err      error         // why it Failed
	check    rules.Check   // the check that answered a Limited or Unavailable call
	decision hybrid.Decision
}

// started is when a call's checks began, for the Observer: the zero Time
// when there is none.
func (ic *Interceptors) started() time.Time {
	if ic.obs == nil {
		return time.Time{}
	}
	return time.Now()
}

// answer reports v, whose checks began at start, to the Observer and
// returns the error a denied or failed call ends with, nil for a call that
// may proceed. setTrailer sets the call's trailer metadata.
func (ic *Interceptors) answer(ctx context.Context, method string, v verdict, start time.Time, setTrailer func(metadata.MD)) error {
	if ic.obs != nil {
		ic.obs.ObserveRequest(observe.RequestEvent{Outcome: v.outcome, Rule: v.rule, Client: v.client, Latency: time.Since(start)})
	}
	switch v.outcome {
	case observe.Passed, observe.ShadowLimited:
		return nil
	case observe.Limited, observe.Banned, observe.Unavailable:
		d := v.denial(method)
		if md := trailer(d); md != nil {
			setTrailer(md)
		}
		if err := ic.onDenied(ctx, d); err != nil {
			return err
		}
		return DefaultOnDenied(ctx, d)
	}
	if err := ic.onError(ctx, method, v.err); err != nil {
		return err
	}
	return DefaultOnError(ctx, method, v.err)
}

// evaluate decides a call of method, whose request message is req (nil for
// a stream).
func (ic *Interceptors) evaluate(ctx context.Context, method string, req any) verdict {
	rs := ic.rules()
	if rs == nil {
		return verdict{outcome: observe.Failed, err: errors.New("grpclimit: the rules source returned nil")}
	}
	if !rs.Enabled() {
		return verdict{outcome: observe.Passed}
	}
	view, err := requestView(ctx, method)
	if err != nil {
		return verdict{outcome: observe.Failed, err: err}
	}
	ip, err := ic.ip.ClientIP(view)
	if err != nil {
		return verdict{outcome: observe.Failed, err: fmt.Errorf("grpclimit: client address: %w", err)}
	}
	ipKey, err := ic.ip.KeyOf(ip)
	if err != nil {
		return verdict{outcome: observe.Failed, err: fmt.Errorf("grpclimit: client address: %w", err)}
	}
	client, err := ic.client(view)
	if err != nil {
		return verdict{outcome: observe.Failed, err: fmt.Errorf("grpclimit: client key: %w", err)}
	}
	r := rules.Request{Method: http.MethodPost, Path: method, IP: ip, IPKey: ipKey, Client: client}
	if ic.user != nil {
		if id, ok := ic.user(ctx); ok {
			r.User = id
		}
	}
	if ic.tier != nil {
		r.Tier = ic.tier(ctx, method)
	}
	if ic.priority != nil {
		r.Priority = ic.priority(ctx, method)
	}
	cost := int64(1)
	if ic.cost != nil {
		if cost = ic.cost(ctx, method, req); cost < 0 {
			return verdict{outcome: observe.Failed, client: client, err: fmt.Errorf("grpclimit: negative call cost %d", cost)}
		}
	}
	shadow := rs.Shadow()
	banned, checks := rs.Plan(r, make([]rules.Check, 0, rs.MaxChecks()))
	if banned {
		if shadow {
			return verdict{outcome: observe.ShadowLimited, rule: observe.RuleBan, client: client}
		}
		return verdict{outcome: observe.Banned, rule: observe.RuleBan, client: client}
	}
	now := ic.lim.Now()
	pen, err := ic.penalties.get(rs)
	if err != nil {
		return verdict{outcome: observe.Failed, client: client, err: err}
	}
	if pen != nil {
		if wait, blocked := pen.Blocked(client, now); blocked {
			if shadow {
				return verdict{outcome: observe.ShadowLimited, rule: observe.RulePenalty, client: client}
			}
			return verdict{outcome: observe.Banned, rule: observe.RulePenalty, client: client, wait: wait}
		}
	}
	v := ic.check(ctx, checks, cost)
	v.client = client
	if pen != nil && (v.outcome == observe.Limited || shadow && v.outcome == observe.ShadowLimited) {
		pen.Strike(client, now)
	}
	return v
}

// check runs the planned checks in order until a live one denies the call.
func (ic *Interceptors) check(ctx context.Context, checks []rules.Check, cost int64) verdict {
	shadowRule := ""
	for _, c := range checks {
		var t0 time.Time
		if ic.obs != nil {
			t0 = time.Now()
		}
		d, err := ic.lim.AllowN(ctx, c.Key, c.Limit, cost)
		if err != nil {
			if c.Shadow {
				ic.log.Warn("grpclimit: shadow check skipped", "rule", c.Rule, "err", err)
				continue
			}
			return verdict{outcome: observe.Failed, err: fmt.Errorf("grpclimit: check %q: %w", c.Rule, err)}
		}
		if ic.obs != nil {
			ic.obs.ObserveCheck(observe.CheckEvent{Rule: c.Rule, Decision: d, Shadow: c.Shadow, Latency: time.Since(t0)})
		}
		switch {
		case c.Shadow:
			if !d.Allowed && shadowRule == "" {
				shadowRule = c.Rule
			}
		case d.Allowed:
		case ic.failClosed && d.Source == hybrid.Degraded:
			return verdict{outcome: observe.Unavailable, wait: d.RetryAfter, check: c, decision: d}
		default:
			return verdict{outcome: observe.Limited, rule: c.Rule, wait: d.RetryAfter, check: c, decision: d}
		}
	}
	if shadowRule != "" {
		return verdict{outcome: observe.ShadowLimited, rule: shadowRule}
	}
	return verdict{outcome: observe.Passed}
}

// requestView is the call as an HTTP request, for the httpkey extractors:
// POST to the full method, from the peer's address, with the incoming
// metadata as its header and the call's context. gRPC runs on HTTP/2, so
// this is the request the server received, pseudo-headers aside.
func requestView(ctx context.Context, method string) (*http.Request, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, method, http.NoBody)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: method %q is not a path: %w", method, err)
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	r.Header = make(http.Header, len(md))
	for k, vs := range md {
		if len(k) > 0 && k[0] == ':' {
			if k == ":authority" && len(vs) > 0 {
				r.Host = vs[0]
			}
			continue
		}
		r.Header[textproto.CanonicalMIMEHeaderKey(k)] = vs
	}
	return r, nil
}

// defaultOnError is DefaultOnError, logging what is not the client's fault.
func (ic *Interceptors) defaultOnError(ctx context.Context, method string, err error) error {
	if !errors.Is(err, httpkey.ErrMalformed) {
		ic.log.Error("grpclimit: call not rate limited", "method", method, "err", err)
	}
	return DefaultOnError(ctx, method, err)
}

// trailer is the trailer metadata of a denial: the retry delay for gRPC's
// own retries (grpc-retry-pushback-ms) and for people (retry-after, whole
// seconds), and for a limited call its limit, as the HTTP middleware's
// X-RateLimit fields. A ban has none.
func trailer(d Denial) metadata.MD {
	if d.Outcome == observe.Banned && d.Rule == observe.RuleBan {
		return nil
	}
	md := metadata.MD{
		PushbackKey:   {strconv.FormatInt(pushbackMillis(d.RetryAfter), 10)},
		RetryAfterKey: {strconv.FormatInt(retrySeconds(d.RetryAfter), 10)},
	}
	if d.Outcome == observe.Limited {
		md[LimitKey] = []string{strconv.FormatInt(d.Check.Limit.Rate, 10)}
		md[RemainingKey] = []string{strconv.FormatInt(d.Decision.Remaining, 10)}
	}
	return md
}

// pushbackMillis is d in whole milliseconds, rounded up, at least 1: a
// client that waits that long finds the call admitted.
func pushbackMillis(d time.Duration) int64 {
	return max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
}

// retrySeconds is d in whole seconds, rounded up, at least 1.
func retrySeconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}
