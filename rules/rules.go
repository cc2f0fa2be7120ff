package rules

import (
	"errors"
	"maps"
	"slices"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Rules is the compiled, validated and immutable form of a Config: what a
// request is planned against (Plan). Build one with Compile or Load, or take
// the current one from a Watcher.
//
// A Rules is safe for concurrent use, and never changes: a reload builds a
// new one. The zero Rules is enabled and has no rules; a nil *Rules is not
// usable.
type Rules struct {
	disabled bool
	shadow   bool

	ban      banList
	global   *compiledRule
	perIP    *compiledRule
	perUser  *compiledRule
	tiers    map[string]*compiledRule
	routes   matcher
	fallback *compiledRule // the default rule

	reserve   float64
	penalty   PenaltyConfig
	hasPen    bool
	maxChecks int
}

// compiledRule is one rule ready for Plan: its name, key prefix and limit
// computed once.
type compiledRule struct {
	name   string      // "tier:free", stable for metrics and logs
	prefix string      // keys are prefix + identity (see key.go)
	key    string      // the global rule's whole key
	lim    limit.Limit //
	shadow bool        // the rule's Shadow OR the Config's
	// reserve is the "reserve:" twin that non-priority traffic passes
	// first; nil without a priority reserve.
	reserve *compiledRule
}

// Compile validates c and builds its Rules. The Rules keep no reference to
// c: changing c afterwards does not change them. Errors are ConfigErrors
// joined with errors.Join, as Validate's.
func Compile(c *Config) (*Rules, error) {
	if c == nil {
		return nil, errors.New("rules: Compile of a nil *Config")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := &Rules{
		disabled: c.Disabled,
		shadow:   c.Shadow,
		ban:      newBanList(c.Ban),
		reserve:  c.Reserve,
	}
	keep := reserveKeep(c.Reserve)
	build := func(name string, rule *Rule) *compiledRule {
		cr := newCompiledRule(name, rule.Limit(), rule.Shadow || c.Shadow)
		if keep < reserveScale {
			cr.reserve = newCompiledRule("reserve:"+name, scaleLimit(cr.lim, keep), cr.shadow)
		}
		return cr
	}
	perRequest := 0
	if c.Global != nil {
		r.global = build("global", c.Global)
		r.global.key = escapeName(r.global.name)
		if r.global.reserve != nil {
			r.global.reserve.key = escapeName(r.global.reserve.name)
		}
		perRequest++
	}
	if c.PerIP != nil {
		r.perIP = build("per_ip", c.PerIP)
		perRequest++
	}
	if c.PerUser != nil {
		r.perUser = build("per_user", c.PerUser)
		perRequest++
	}
	if len(c.Tiers) > 0 {
		r.tiers = make(map[string]*compiledRule, len(c.Tiers))
		for name, rule := range c.Tiers {
			r.tiers[name] = build("tier:"+name, &rule)
		}
		perRequest++
	}
	// Sorted, so that a path's method routes are in a stable order.
	for _, name := range slices.Sorted(maps.Keys(c.Endpoints)) {
		rule := c.Endpoints[name]
		p, _ := parsePattern(name) // Validate accepted it
		r.routes.add(p, build("endpoint:"+p.String(), &rule))
	}
	if c.Default != nil {
		r.fallback = build("default", c.Default)
	}
	if len(c.Endpoints) > 0 || c.Default != nil {
		perRequest++
	}
	if keep < reserveScale {
		perRequest *= 2
	}
	r.maxChecks = perRequest
	if c.Penalty != nil {
		r.penalty, r.hasPen = *c.Penalty, true
		r.penalty.at = penaltyOrigins{}
	}
	return r, nil
}

func newCompiledRule(name string, l limit.Limit, shadow bool) *compiledRule {
	return &compiledRule{name: name, prefix: keyPrefix(name), lim: l, shadow: shadow}
}

// Enabled reports whether the rules are on (YAML enabled, the
// RATE_LIMIT_ENABLED variable). When they are off, Plan plans nothing.
func (r *Rules) Enabled() bool { return !r.disabled }

// Shadow reports global shadow mode. Every Check already carries it; a
// caller needs it for the ban, which Plan reports as banned even in shadow
// mode so that it can be counted: in shadow mode, count the ban and let the
// request through.
func (r *Rules) Shadow() bool { return r.shadow }

// Reserve is the priority reserve: the fraction of every limit normal
// traffic may not use.
func (r *Rules) Reserve() float64 { return r.reserve }

// Penalty returns the penalty configuration, and false if there is none.
func (r *Rules) Penalty() (PenaltyConfig, bool) { return r.penalty, r.hasPen }

// MaxChecks is the most checks Plan appends for one request: a dst with this
// much spare capacity is never grown.
func (r *Rules) MaxChecks() int { return r.maxChecks }
