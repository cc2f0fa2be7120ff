package rules

import (
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// The environment variables FromEnv and ApplyEnv read. A variable that is
// unset or empty (after trimming spaces) is ignored.
const (
	// EnvEnabled turns the rules on or off: true or false (strconv.ParseBool).
	EnvEnabled = "RATE_LIMIT_ENABLED"
	// EnvAlgorithm is the algorithm of the rules the environment shapes (see
	// ApplyEnv): any name limit.ParseAlgorithm accepts.
	EnvAlgorithm = "RATE_LIMIT_ALGORITHM"
	// EnvDefault is the default rule's requests per window.
	EnvDefault = "RATE_LIMIT_DEFAULT"
	// EnvWindow is the window of the rules the environment shapes: seconds,
	// or a Go duration string.
	EnvWindow = "RATE_LIMIT_WINDOW"
	// EnvPerIP is the per_ip rule's requests per window.
	EnvPerIP = "RATE_LIMIT_PER_IP"
	// EnvPerUser is the per_user rule's requests per window.
	EnvPerUser = "RATE_LIMIT_PER_USER"
	// EnvBurst is the default rule's burst. It applies only when the default
	// rule's algorithm is a bucket (token_bucket, leaky_bucket); for the
	// window algorithms, which have no burst, it is ignored.
	EnvBurst = "RATE_LIMIT_BURST"
)

// FromEnv builds a Config from the environment alone, read through lookup
// (os.LookupEnv in production). It is ApplyEnv on an empty Config: see there
// for what each variable sets. With no variable set, the Config is enabled
// and has no rules. Errors name the variable and its value.
func FromEnv(lookup func(string) (string, bool)) (*Config, error) {
	c := &Config{}
	if err := c.ApplyEnv(lookup); err != nil {
		return nil, err
	}
	return c, nil
}

// ApplyEnv overlays the environment, read through lookup, on c: each
// variable that is set wins over what c holds for the fields it sets, and
// c keeps everything else. The precedence, highest first, is therefore
// environment variable, then file (or code), then the built-in defaults
// (enabled, token_bucket, burst equal to requests).
//
//   - RATE_LIMIT_ENABLED sets enabled.
//   - RATE_LIMIT_DEFAULT sets the default rule's requests, creating the rule
//     if c has none.
//   - RATE_LIMIT_PER_IP and RATE_LIMIT_PER_USER set the per_ip and per_user
//     rules' requests, creating the rule if c has none. A rule they create
//     takes its window and algorithm from the default rule unless
//     RATE_LIMIT_WINDOW or RATE_LIMIT_ALGORITHM set them.
//   - RATE_LIMIT_WINDOW and RATE_LIMIT_ALGORITHM set the window and algorithm
//     of the rules the environment shapes: the default rule (from the file or
//     the environment), and per_ip and per_user when their own variable is
//     set. When RATE_LIMIT_ALGORITHM makes a rule a window algorithm, a burst
//     the file gave it is dropped, as window algorithms have none.
//   - RATE_LIMIT_BURST sets the default rule's burst when its algorithm is a
//     bucket, and is ignored for the window algorithms.
//
// A variable that would apply to no rule (RATE_LIMIT_WINDOW,
// RATE_LIMIT_ALGORITHM or RATE_LIMIT_BURST with no default rule and neither
// RATE_LIMIT_PER_IP nor RATE_LIMIT_PER_USER) is an error, not silently
// dropped. ApplyEnv then validates the result, so a nil error means c
// compiles. On error, c is unchanged. Errors name the variable and its value.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	var p problems
	get := func(name string) (string, origin, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, origin{env: name, raw: v}, ok && v != ""
	}
	count := func(name, path string) (int64, origin, bool) {
		v, o, ok := get(name)
		if !ok {
			return 0, o, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			p.add(o, path, "want an integer")
			return 0, o, false
		}
		return n, o, true
	}

	n := *c // work on a copy: c stays unchanged on error
	if v, o, ok := get(EnvEnabled); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			p.add(o, "rate_limits.enabled", "want true or false")
		} else {
			n.Disabled = !b
		}
	}
	var alg limit.Algorithm
	v, algAt, algSet := get(EnvAlgorithm)
	if algSet {
		var err error
		if alg, err = parseAlgorithm(v); err != nil {
			p.add(algAt, "", "%v", err)
			algSet = false
		}
	}
	var window time.Duration
	v, winAt, winSet := get(EnvWindow)
	if winSet {
		var err error
		if window, err = parseSeconds(v); err != nil {
			p.add(winAt, "", "%v", err)
			winSet = false
		}
	}
	def, defAt, defSet := count(EnvDefault, "rate_limits.default.requests")
	perIP, ipAt, ipSet := count(EnvPerIP, "rate_limits.per_ip.requests")
	perUser, userAt, userSet := count(EnvPerUser, "rate_limits.per_user.requests")
	burst, burstAt, burstSet := count(EnvBurst, "rate_limits.default.burst")
	if len(p.list) > 0 {
		return p.err("")
	}

	setAlgorithm := func(r *Rule) {
		r.Algorithm, r.at.algorithm = alg, algAt
		if !alg.IsBucket() {
			r.Burst, r.at.burst = 0, origin{}
		}
	}
	if defSet {
		n.Default = cloneRule(n.Default, defAt)
		n.Default.Requests, n.Default.at.requests = def, defAt
	} else if n.Default != nil {
		n.Default = cloneRule(n.Default, origin{})
	}
	if d := n.Default; d != nil {
		if winSet {
			d.Window, d.at.window = window, winAt
		}
		if algSet {
			setAlgorithm(d)
		}
		if burstSet && d.Algorithm.IsBucket() {
			d.Burst, d.at.burst = burst, burstAt
		}
		if d.Window == 0 && defSet && !winSet {
			p.add(defAt, "rate_limits.default.window", "required: set %s or rate_limits.default.window", EnvWindow)
			d.at.window.bad = true
		}
	}
	shape := func(rule **Rule, requests int64, at origin, path string) {
		created := *rule == nil
		r := cloneRule(*rule, at)
		*rule = r
		r.Requests, r.at.requests = requests, at
		switch {
		case winSet:
			r.Window, r.at.window = window, winAt
		case created && n.Default != nil:
			r.Window, r.at.window = n.Default.Window, n.Default.at.window
		case created:
			p.add(at, path+".window", "required: set %s", EnvWindow)
			r.at.window.bad = true
		}
		switch {
		case algSet:
			setAlgorithm(r)
		case created && n.Default != nil:
			r.Algorithm, r.at.algorithm = n.Default.Algorithm, n.Default.at.algorithm
		}
	}
	if ipSet {
		shape(&n.PerIP, perIP, ipAt, "rate_limits.per_ip")
	}
	if userSet {
		shape(&n.PerUser, perUser, userAt, "rate_limits.per_user")
	}
	if n.Default == nil && !ipSet && !userSet {
		for _, u := range []struct {
			set bool
			at  origin
		}{{winSet, winAt}, {algSet, algAt}, {burstSet, burstAt}} {
			if u.set {
				p.add(u.at, "", "applies to no rule: set %s, %s or %s, or give the file a default rule", EnvDefault, EnvPerIP, EnvPerUser)
			}
		}
	} else if n.Default == nil && burstSet {
		p.add(burstAt, "", "applies to no rule: the burst is the default rule's; set %s or give the file a default rule", EnvDefault)
	}
	if len(p.list) == 0 {
		n.validate(&p)
	}
	if err := p.err(""); err != nil {
		return err
	}
	*c = n
	return nil
}

// cloneRule returns a copy of r to modify, or a new rule created by the
// variable at if r is nil.
func cloneRule(r *Rule, at origin) *Rule {
	if r == nil {
		return &Rule{at: ruleOrigins{rule: at}}
	}
	cp := *r
	return &cp
}
