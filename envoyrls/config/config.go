package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Config is a loaded configuration: for each domain, a tree of descriptors
// and the rules on them. Build one with Parse, Load or LoadDir. A Config
// never changes once built and is safe for concurrent use; reloading builds
// a new one.
type Config struct {
	domains map[string]*node
	files   []string
	rules   int
}

// node is one level of a domain's descriptor tree.
type node struct {
	children        map[string]*node // by "key" or "key_value"
	wildcards       []string         // the children's names ending in "*", in the order written
	rule            *Rule
	valueToMetric   bool
	shareThreshold  bool
	wildcardPattern string // the node's own name when it ends in "*" and shares its threshold
}

// Rule is one rate_limit block: what the service enforces on a descriptor
// that matches it.
type Rule struct {
	// Key names the rule as envoyproxy/ratelimit's statistics do: the domain
	// and the descriptors leading to it, "domain.key_value.key".
	Key string
	// Name and Replaces are rate_limit's name and replaces: a rule that
	// matches in a request drops, in that request, every rule named in its
	// Replaces.
	Name     string
	Replaces []string
	// RequestsPerUnit per Unit is the limit. Zero RequestsPerUnit blocks
	// every request (envoyproxy/ratelimit's way to deny a value).
	RequestsPerUnit uint32
	Unit            Unit
	// Unlimited rules admit everything and count nothing.
	Unlimited bool
	// ShadowMode rules decide and count, but always answer OK. QuotaMode
	// rules answer OK too, and are reported in the response's metadata by
	// envoyproxy/ratelimit (not here).
	ShadowMode, QuotaMode bool
	// DetailedMetric names the rule's metrics after the request's
	// descriptor values rather than after the rule.
	DetailedMetric bool
	// Limit is what the limiter enforces: RequestsPerUnit per Unit's period,
	// with the algorithm and burst written beside them. Its Rate is zero
	// when the rule is Unlimited or RequestsPerUnit is zero.
	Limit limit.Limit
	// EnvoyCounting is set when the rule names no algorithm: it is then a
	// fixed window aligned as envoyproxy/ratelimit aligns its windows, and,
	// as there, the hits of a denied request count too, so a client over
	// the limit stays over it until the window ends, whatever the weight of
	// its later requests. With an algorithm, a denied request spends
	// nothing.
	EnvoyCounting bool
	// File and Line say where the rule is written.
	File string
	Line int
}

// String describes the rule as "domain.key_value: 10/second (file:line)".
func (r *Rule) String() string {
	var b strings.Builder
	b.WriteString(r.Key)
	b.WriteString(": ")
	switch {
	case r.Unlimited:
		b.WriteString("unlimited")
	default:
		fmt.Fprintf(&b, "%d/%s", r.RequestsPerUnit, r.Unit)
		if !r.EnvoyCounting {
			fmt.Fprintf(&b, " %s", r.Limit.Algorithm)
			if r.Limit.Algorithm.IsBucket() {
				fmt.Fprintf(&b, " burst %d", r.Limit.Capacity())
			}
		}
	}
	if r.Name != "" {
		fmt.Fprintf(&b, " name=%s", r.Name)
	}
	if len(r.Replaces) > 0 {
		fmt.Fprintf(&b, " replaces=%s", strings.Join(r.Replaces, ","))
	}
	if r.ShadowMode {
		b.WriteString(" shadow_mode")
	}
	if r.QuotaMode {
		b.WriteString(" quota_mode")
	}
	fmt.Fprintf(&b, " (%s:%d)", r.File, r.Line)
	return b.String()
}

// Entry is one key/value pair of a request's descriptor.
type Entry struct{ Key, Value string }

// Match is the rule a descriptor matched.
type Match struct {
	Rule *Rule
	// Counter names the count the descriptor spends from: the domain and
	// every entry, "domain_key_value_key2_value2_", as envoyproxy/ratelimit
	// names its Redis keys (without their time suffix), so two values of a
	// key without a configured value, or matching a wildcard, count apart,
	// unless the wildcard shares its threshold (then the pattern stands for
	// the value).
	Counter string
	// Metric names the match in metrics: the Rule's Key, or with
	// detailed_metric or value_to_metric the request's values, as
	// envoyproxy/ratelimit names its statistics.
	Metric string
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// Files returns the files the configuration was loaded from, in load order.
func (c *Config) Files() []string { return slices.Clone(c.files) }

// Len returns the number of rules.
func (c *Config) Len() int { return c.rules }

// Rules returns every rule, sorted by Key.
func (c *Config) Rules() []*Rule {
	var out []*Rule
	var walk func(n *node)
	walk = func(n *node) {
		if n.rule != nil {
			out = append(out, n.rule)
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	for _, d := range c.domains {
		walk(d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Dump describes every rule, one a line, sorted: what the service
// enforces.
func (c *Config) Dump() string {
	var b strings.Builder
	for _, r := range c.Rules() {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Lookup returns the rule that applies to a descriptor with these entries
// in domain, and reports false when none does (no such domain, no matching
// path, or a descriptor longer or shorter than the path to a rule).
//
// It matches as envoyproxy/ratelimit does, level by level: first the
// entry's key and value, then the wildcards of that level in the order they
// are written (a value written "abc*" matches every value starting with
// "abc"), then the key alone (any value). A rule applies only where the
// descriptor ends: a shorter or longer descriptor does not match it.
func (c *Config) Lookup(domain string, entries []Entry) (Match, bool) {
	d := c.domains[domain]
	if d == nil || len(entries) == 0 {
		return Match{}, false
	}
	var (
		rule     *Rule
		patterns []string // share_threshold patterns by entry, nil if none
		// The metric name's value of each entry: "" leaves the value out.
		// It differs from the rule's key only where value_to_metric or a
		// shared threshold applies (custom).
		values = make([]string, len(entries))
		custom bool
	)
	prev := d
	for i, e := range entries {
		name := e.Key + "_" + e.Value
		next := prev.children[name]
		wildcard := ""
		if next == nil {
			for _, wk := range prev.wildcards {
				if strings.HasPrefix(name, strings.TrimSuffix(wk, "*")) {
					next, wildcard = prev.children[wk], wk
					break
				}
			}
		}
		byValue := next != nil
		if next == nil {
			next = prev.children[e.Key]
		}
		if next == nil {
			break
		}
		switch {
		case wildcard != "" && next.shareThreshold && next.wildcardPattern != "":
			if patterns == nil {
				patterns = make([]string, len(entries))
			}
			patterns[i] = strings.TrimPrefix(next.wildcardPattern, e.Key+"_")
			values[i], custom = patterns[i], true
		case wildcard != "" && next.valueToMetric:
			values[i], custom = e.Value, true
		case wildcard != "":
			values[i] = strings.TrimPrefix(wildcard, e.Key+"_")
		case byValue:
			values[i] = e.Value
		case next.valueToMetric:
			values[i], custom = e.Value, true
		}
		if next.rule != nil && i == len(entries)-1 {
			rule = next.rule
		}
		if len(next.children) == 0 {
			break
		}
		prev = next
	}
	if rule == nil {
		return Match{}, false
	}
	m := Match{Rule: rule, Counter: counterKey(domain, entries, patterns), Metric: rule.Key}
	switch {
	case rule.DetailedMetric && patterns != nil:
		m.Metric = patternKey(domain, entries, patterns)
	case rule.DetailedMetric:
		m.Metric = DescriptorKeyFull(domain, entries)
	case custom:
		var b strings.Builder
		b.WriteString(domain)
		for i, e := range entries {
			b.WriteByte('.')
			b.WriteString(e.Key)
			if values[i] != "" {
				b.WriteByte('_')
				b.WriteString(values[i])
			}
		}
		m.Metric = b.String()
	}
	return m, true
}

// DescriptorKeyFull names a descriptor with every entry's key and value,
// "domain.k1_v1.k2_", as envoyproxy/ratelimit's detailed metrics do.
func DescriptorKeyFull(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		b.WriteByte('_')
		b.WriteString(e.Value)
	}
	return b.String()
}

// counterKey is envoyproxy/ratelimit's cache key without its prefix and
// time: "domain_k1_v1_k2_v2_", with shared patterns for values.
func counterKey(domain string, entries []Entry, patterns []string) string {
	var b strings.Builder
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range entries {
		b.WriteString(e.Key)
		b.WriteByte('_')
		if patterns != nil && patterns[i] != "" {
			b.WriteString(patterns[i])
		} else {
			b.WriteString(e.Value)
		}
		b.WriteByte('_')
	}
	return b.String()
}

// CounterKey is Match.Counter for a descriptor that no configured rule
// names, such as one that carries its own limit: "domain_k1_v1_k2_v2_".
func CounterKey(domain string, entries []Entry) string { return counterKey(domain, entries, nil) }

// DescriptorKey names a descriptor as envoyproxy/ratelimit's statistics do
// for a limit carried in the request: "domain.k1_v1.k2" (a value is left
// out when empty).
func DescriptorKey(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	b.WriteByte('.')
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// patternKey is the detailed metric name with shared patterns.
func patternKey(domain string, entries []Entry, patterns []string) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		switch {
		case patterns[i] != "":
			b.WriteByte('_')
			b.WriteString(patterns[i])
		case e.Value != "":
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}
