package rules

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Validate reports every problem with c (up to MaxErrors) as ConfigErrors
// joined with errors.Join: the checks Parse and Compile make. Values read
// from a file or the environment are reported with their line or variable.
func (c *Config) Validate() error {
	var p problems
	c.validate(&p)
	return p.err("")
}

func (c *Config) validate(p *problems) {
	keep := reserveKeep(c.Reserve)
	reserveOK := c.reserveValid()
	rule := func(r *Rule, path string) {
		if r != nil && r.validate(p, path) && reserveOK && keep < reserveScale {
			r.validateReserve(p, path, keep)
		}
	}
	rule(c.Default, "rate_limits.default")
	rule(c.Global, "rate_limits.global")
	rule(c.PerIP, "rate_limits.per_ip")
	rule(c.PerUser, "rate_limits.per_user")

	seen := make(map[string]string, len(c.Endpoints))
	// In file order, so a duplicate is reported where it repeats.
	names := slices.SortedFunc(maps.Keys(c.Endpoints), func(a, b string) int {
		return cmp.Or(cmp.Compare(c.Endpoints[a].at.rule.line, c.Endpoints[b].at.rule.line), strings.Compare(a, b))
	})
	for _, name := range names {
		r := c.Endpoints[name]
		path := fieldPath("rate_limits.endpoints", name)
		pat, err := parsePattern(name)
		if err != nil {
			p.add(r.at.rule, path, "%v", err)
		} else if other, dup := seen[pat.String()]; dup {
			p.add(r.at.rule, path, "same endpoint as %q", other)
		} else {
			seen[pat.String()] = name
		}
		rule(&r, path)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Tiers)) {
		r := c.Tiers[name]
		path := fieldPath("rate_limits.tiers", name)
		if strings.TrimSpace(name) == "" {
			p.add(r.at.rule, path, "tier name must not be empty")
		}
		rule(&r, path)
	}
	for i, b := range c.Ban {
		if !b.IsValid() {
			p.add(origin{}, fmt.Sprintf("rate_limits.ban[%d]", i), "invalid prefix %v", b)
		}
	}
	if c.Penalty != nil {
		c.Penalty.validate(p, "rate_limits.penalty")
	}
	if !c.reserveAt.bad && !reserveOK {
		p.add(c.reserveAt, "rate_limits.priority.reserve", "must be in [0, 1), got %s", shown(c.reserveAt, c.Reserve))
	}
}

// reserveValid reports whether c.Reserve is a usable reserve.
func (c *Config) reserveValid() bool {
	return !c.reserveAt.bad && !math.IsNaN(c.Reserve) && c.Reserve >= 0 && c.Reserve < 1
}

// validate reports r's problems and returns whether r is a valid limit.
func (r *Rule) validate(p *problems, path string) bool {
	ok := !r.at.requests.bad && !r.at.window.bad && !r.at.algorithm.bad && !r.at.burst.bad
	if !r.at.requests.bad && r.Requests <= 0 {
		p.add(r.at.requests, path+".requests", "must be positive, got %s", shown(r.at.requests, r.Requests))
		ok = false
	}
	if !r.at.window.bad && r.Window <= 0 && r.Calendar == limit.NoCalendar {
		p.add(r.at.window, path+".window", "must be positive, got %s", shown(r.at.window, r.Window))
		ok = false
	}
	if r.Zone != "" {
		if r.Calendar == limit.NoCalendar {
			p.add(r.at.zone, path+".zone", "a zone needs a calendar window (day, week, month or year), got window %s", shown(r.at.window, r.Window))
			ok = false
		} else if _, err := time.LoadLocation(r.Zone); err != nil {
			p.add(r.at.zone, path+".zone", "unknown time zone %q", r.Zone)
			ok = false
		}
	}
	if !r.at.burst.bad {
		switch {
		case r.Burst < 0:
			p.add(r.at.burst, path+".burst", "must not be negative, got %s", shown(r.at.burst, r.Burst))
			ok = false
		case r.Burst > 0 && !r.at.algorithm.bad && !r.Algorithm.IsBucket():
			p.add(r.at.burst, path+".burst", "burst is only for token_bucket and leaky_bucket, not %v", r.Algorithm)
			ok = false
		}
	}
	if !ok {
		return false
	}
	if err := r.Limit().Validate(); err != nil {
		p.addErr(r.at.rule, path, err, "%s%s", strings.TrimPrefix(err.Error(), "limit: "), r.envSources())
		return false
	}
	return true
}

// envSources names the environment variables that set fields of r, when
// the rule itself did not come from the environment, so that an error about
// the rule as a whole points at every place it was configured.
func (r *Rule) envSources() string {
	var vars []string
	for _, o := range []origin{r.at.requests, r.at.window, r.at.algorithm, r.at.burst} {
		if o.env != "" && o.env != r.at.rule.env {
			vars = append(vars, fmt.Sprintf("%s=%s", o.env, quote(o.raw)))
		}
	}
	if len(vars) == 0 {
		return ""
	}
	return " (set by " + strings.Join(vars, ", ") + ")"
}

// validateReserve reports a reserve check limit that cannot be enforced:
// rounding the rate down to at least 1 can stretch a bucket's span.
func (r *Rule) validateReserve(p *problems, path string, keep int64) {
	if err := scaleLimit(r.Limit(), keep).Validate(); err != nil {
		p.addErr(r.at.rule, path, err, "its reserve check (scaled by priority.reserve): %s", strings.TrimPrefix(err.Error(), "limit: "))
	}
}

func (pc *PenaltyConfig) validate(p *problems, path string) {
	if !pc.at.strikes.bad && (pc.Strikes < 1 || pc.Strikes > MaxStrikes) {
		p.add(pc.at.strikes, path+".strikes", "must be between 1 and %d, got %s", MaxStrikes, shown(pc.at.strikes, pc.Strikes))
	}
	for _, f := range []struct {
		name string
		o    origin
		d    any
		ok   bool
	}{
		{"within", pc.at.within, pc.Within, pc.Within > 0},
		{"base", pc.at.base, pc.Base, pc.Base > 0},
		{"max", pc.at.max, pc.Max, pc.Max > 0},
	} {
		if !f.o.bad && !f.ok {
			p.add(f.o, path+"."+f.name, "must be positive, got %s", shown(f.o, f.d))
		}
	}
	if !pc.at.base.bad && !pc.at.max.bad && pc.Base > 0 && pc.Max > 0 && pc.Max < pc.Base {
		p.add(pc.at.max, path+".max", "must be at least base (%v), got %v", pc.Base, pc.Max)
	}
}

// shown is a value as written when it was read from text, else as Go
// prints it.
func shown(o origin, v any) string {
	if o.raw != "" {
		return o.raw
	}
	return fmt.Sprint(v)
}
