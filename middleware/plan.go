package middleware

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Planner turns an HTTP request into the checks the rules plan for it, as
// the middleware runs them: who the client is (Config.Client, and
// Config.IP's address behind the trusted proxies), the rules.Request the
// rules see, the request's cost, and the rules' plan. The middleware plans
// every request with its Planner; `hybridlimit explain` and `hybridlimit
// replay` plan with one built from the same Config fields, so that what they
// show is what the middleware does.
//
// A Planner is safe for concurrent use. Make one with NewPlanner.
type Planner struct {
	ip       httpkey.IPResolver
	client   httpkey.Extractor
	user     func(context.Context) (string, bool)
	tier     func(*http.Request) string
	priority func(*http.Request) bool
	cost     func(*http.Request) int64
}

// NewPlanner returns the Planner of cfg's IP, Client, User, Tier,
// Priority and Cost fields, with their defaults (Config says what each
// means); the other fields are not read. It fails only for an IP resolver
// that every request would fail.
func NewPlanner(cfg Config) (*Planner, error) {
	if err := cfg.IP.Validate(); err != nil {
		return nil, fmt.Errorf("middleware: Config.IP: %w", err)
	}
	p := &Planner{ip: cfg.IP, client: cfg.Client, user: cfg.User, tier: cfg.Tier, priority: cfg.Priority, cost: cfg.Cost}
	p.ip.TrustedProxies = slices.Clone(cfg.IP.TrustedProxies)
	if p.client == nil {
		p.client = httpkey.IP(p.ip)
	}
	return p, nil
}

// Plan is what a Planner planned for one request.
type Plan struct {
	// Enabled is the rules' switch: when false nothing is checked and the
	// other fields are zero.
	Enabled bool
	// Request is the request as the rules see it: method, cleaned path,
	// client address and the key per_ip counts it under, client identity,
	// user, tier and priority. Client is set as soon as it is known, also
	// when Plan fails later.
	Request rules.Request
	// Cost is the weight each check spends (Config.Cost; 1 by default).
	Cost int64
	// Banned reports the client address on the ban list: no check is
	// planned, and the middleware answers 403 (counts it, in shadow mode).
	Banned bool
	// Checks are the checks to run, in order; the first live one that
	// denies answers the request.
	Checks []rules.Check
}

// Plan plans r under rs, appending the checks to dst (given MaxChecks
// spare capacity, it allocates nothing for them). An error means the
// middleware could not check r (Outcome Failed, answered by OnError): the
// client key could not be made (wrapping httpkey.ErrNoKey or
// httpkey.ErrMalformed), the address could not be read, or the cost was
// negative. The Plan holds what was known until then.
func (p *Planner) Plan(r *http.Request, rs *rules.Rules, dst []rules.Check) (Plan, error) {
	if !rs.Enabled() {
		return Plan{}, nil
	}
	pl := Plan{Enabled: true}
	client, err := p.client(r)
	if err != nil {
		return pl, fmt.Errorf("middleware: client key: %w", err)
	}
	pl.Request.Client = client
	ip, err := p.ip.ClientIP(r)
	if err != nil {
		return pl, fmt.Errorf("middleware: client address: %w", err)
	}
	ipKey, err := p.ip.KeyOf(ip)
	if err != nil {
		return pl, fmt.Errorf("middleware: client address: %w", err)
	}
	pl.Request = rules.Request{Method: r.Method, Path: cleanPath(r.URL.Path), IP: ip, IPKey: ipKey, Client: client}
	if p.user != nil {
		if id, ok := p.user(r.Context()); ok {
			pl.Request.User = id
		}
	}
	if p.tier != nil {
		pl.Request.Tier = p.tier(r)
	}
	if p.priority != nil {
		pl.Request.Priority = p.priority(r)
	}
	pl.Cost = 1
	if p.cost != nil {
		if pl.Cost = p.cost(r); pl.Cost < 0 {
			return pl, fmt.Errorf("middleware: negative request cost %d", pl.Cost)
		}
	}
	pl.Banned, pl.Checks = rs.Plan(pl.Request, dst)
	return pl, nil
}

// IP returns the resolver the Planner finds client addresses with (a copy:
// changing it changes nothing), for a caller that explains them
// (httpkey.IPResolver.Trace).
func (p *Planner) IP() httpkey.IPResolver {
	ip := p.ip
	ip.TrustedProxies = slices.Clone(p.ip.TrustedProxies)
	return ip
}
