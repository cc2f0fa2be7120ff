package rules

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzParse checks that the loader never panics, that every error it
// returns is a "rules: " error, and that whatever it accepts compiles and
// plans. Without -fuzz it runs the seed corpus only.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		basicYAML,
		fullYAML,
		planYAML,
		"",
		"rate_limits: {}",
		"rate_limits:\n  default: {requests: 10, window: 60\n",
		"rate_limits:\n  default: {requests: -5, window: 0, algorithm: nope, burst: 0}\n",
		"rate_limits:\n  ban: [300.0.0.0/8, 10.0.0.0/33, fe80::1%eth0]\n",
		"rate_limits:\n  tiers:\n    a: &x {requests: 1, window: 1}\n    b: *x\n    c: {<<: *x}\n",
		"rate_limits:\n  endpoints:\n    \"GET /a/*\": {requests: 1, window: 1m}\n    /a/*/b: {requests: 1, window: 1}\n",
		"rate_limits:\n  penalty: {strikes: 3, within: 60, base: 10, max: 3600}\n  priority: {reserve: .nan}\n",
		"rate_limits:\n  global: {requests: 99999999999999999999, window: 1e300}\n",
		"rate_limits: !!binary aGVsbG8=\n",
		"a: &a [*a]\n",
		"---\n---\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("a Config with an error: %v", err)
			}
			for _, e := range leafErrors(err) {
				if !strings.HasPrefix(e.Error(), "rules: ") {
					t.Fatalf("error without the rules: prefix: %q", e.Error())
				}
			}
			return
		}
		r, err := Compile(cfg)
		if err != nil {
			t.Fatalf("Parse accepted what Compile rejects: %v", err)
		}
		for _, req := range []Request{
			{},
			{Method: "POST", Path: "/api/v1/upload", IP: netip.MustParseAddr("203.0.113.9"), Client: "c", User: "u", Tier: "free"},
			{Method: "GET", Path: "/api/v1/items/1", IP: netip.MustParseAddr("2001:db8::1"), Client: "c", Priority: true},
		} {
			_, _ = r.Plan(req, nil)
		}
	})
}

// leafErrors flattens errors.Join trees.
func leafErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	}
	return []error{err}
}
