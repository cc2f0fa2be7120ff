package rules

import (
	"fmt"
	"slices"
	"strings"
)

// pattern is a parsed endpoint pattern: "PATH", "METHOD PATH", and either
// with a PATH ending in "/*" for a subtree.
type pattern struct {
	method string // upper case; "" for any method
	path   string // for a subtree, without its "/*"
	prefix bool   // the pattern ends in "/*"
}

// parsePattern reads an endpoint pattern.
func parsePattern(s string) (pattern, error) {
	var p pattern
	f := strings.Fields(s)
	switch len(f) {
	case 1:
		p.path = f[0]
	case 2:
		p.method, p.path = f[0], f[1]
	default:
		return p, fmt.Errorf("want \"PATH\" or \"METHOD PATH\", got %q", s)
	}
	if p.method != "" {
		if i := strings.IndexFunc(p.method, func(r rune) bool { return !isTokenChar(r) }); i >= 0 {
			return p, fmt.Errorf("method %q is not an HTTP method token", p.method)
		}
		p.method = strings.ToUpper(p.method)
	}
	if !strings.HasPrefix(p.path, "/") {
		return p, fmt.Errorf("path %q must start with /", p.path)
	}
	if strings.ContainsAny(p.path, "?#") {
		return p, fmt.Errorf("path %q must not hold a query or fragment", p.path)
	}
	if rest, ok := strings.CutSuffix(p.path, "/*"); ok {
		p.path, p.prefix = rest, true
	}
	if strings.Contains(p.path, "*") {
		return p, fmt.Errorf("path %q: * is allowed only as a final /* segment", s)
	}
	return p, nil
}

// isTokenChar reports whether r may appear in an HTTP method (RFC 9110
// token).
func isTokenChar(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return true
	}
	return strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

// String is the pattern's normal form, used in its rule name:
// "POST /api/v1/upload", "/api/v1/items/*".
func (p pattern) String() string {
	s := p.path
	if p.prefix {
		s += "/*"
	}
	if p.method != "" {
		s = p.method + " " + s
	}
	return s
}

// routes are the rules of one path: per method, and for any method.
type routes struct {
	any     *compiledRule
	methods []methodRoute
}

type methodRoute struct {
	method string
	rule   *compiledRule
}

// pick returns the rule for method: the method's own, else the any-method
// one, else nil. Methods compare case-insensitively, so "post" cannot slip
// past a POST rule.
func (r *routes) pick(method string) *compiledRule {
	for _, m := range r.methods {
		if strings.EqualFold(m.method, method) {
			return m.rule
		}
	}
	return r.any
}

// matcher finds the endpoint rule of a request: an exact path first, then
// the longest subtree prefix, and within one pattern path the method's own
// rule before the any-method one.
//
// A subtree pattern "/a/*" matches "/a" and every path under "/a/". Only the
// prefix lengths the configuration uses are tried, so a long request path
// costs at most one map lookup per distinct prefix length.
type matcher struct {
	exact  map[string]*routes
	prefix map[string]*routes
	lens   []int // distinct prefix lengths, longest first
}

func (m *matcher) add(p pattern, c *compiledRule) {
	table := &m.exact
	if p.prefix {
		table = &m.prefix
		if !slices.Contains(m.lens, len(p.path)) {
			m.lens = append(m.lens, len(p.path))
			slices.SortFunc(m.lens, func(a, b int) int { return b - a })
		}
	}
	if *table == nil {
		*table = make(map[string]*routes)
	}
	r := (*table)[p.path]
	if r == nil {
		r = &routes{}
		(*table)[p.path] = r
	}
	if p.method == "" {
		r.any = c
	} else {
		r.methods = append(r.methods, methodRoute{p.method, c})
	}
}

func (m *matcher) match(method, path string) *compiledRule {
	if r := m.exact[path]; r != nil {
		if c := r.pick(method); c != nil {
			return c
		}
	}
	for _, n := range m.lens {
		if len(path) < n || len(path) > n && path[n] != '/' {
			continue
		}
		if r := m.prefix[path[:n]]; r != nil {
			if c := r.pick(method); c != nil {
				return c
			}
		}
	}
	return nil
}
