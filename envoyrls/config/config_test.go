package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Every file envoyproxy/ratelimit refuses (its own test files, rewritten
// here) is refused, with the file, the line and the field.
func TestRefused(t *testing.T) {
	cases := []struct {
		name, yaml string
		line       int
		field, msg string
	}{
		{"empty domain", "descriptors:\n", 1, "domain", "config file cannot have empty domain"},
		{"empty file", "", 0, "domain", "config file cannot have empty domain"},
		{"empty key", "domain: d\ndescriptors:\n  - value: value1\n", 3, "descriptors[0].key", "descriptor has empty key"},
		{"duplicate composite key", "domain: d\ndescriptors:\n  - key: key1\n    value: value1\n\n  - key: key1\n    value: value1\n", 6, "descriptors[1]",
			`duplicate descriptor composite key "d.key1_value1" (first at f.yaml line 3)`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n", 5, "descriptors[0].rate_limit.unit",
			`invalid rate limit unit "foo" (want second, minute, hour, day, week, month or year)`},
		{"missing unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n", 5, "descriptors[0].rate_limit.unit", `invalid rate limit unit ""`},
		{"bad yaml", "'''\n", 2, "", "invalid YAML: found unexpected end of stream"},
		{"misspelled rate_limit", "domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: day\n", 4, "descriptors[0].ratelimit", `unknown key "ratelimit" here`},
		{"misspelled requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n", 6,
			"descriptors[0].rate_limit.requestsperunit", `unknown key "requestsperunit" here`},
		{"misplaced unit", "domain: d\ndescriptors:\n  - key: k\n    unit: day\n", 4, "descriptors[0].unit", "it belongs inside rate_limit"},
		{"non-string key", "0.25: d\ndescriptors:\n", 1, "", `key "0.25" is not a string`},
		{"non-map list", "domain: d\ndescriptors:\n  - a\n  - b\n", 3, "descriptors[0]", `a descriptor must be a mapping, got "a"`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n", 6,
			"descriptors[0].rate_limit.unit", "should not specify rate limit unit when unlimited"},
		{"replaces self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name: self\n      unit: second\n      requests_per_unit: 5\n", 7,
			"descriptors[0].rate_limit.replaces[0].name", "replaces should not contain name of same descriptor"},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name:\n      unit: second\n      requests_per_unit: 5\n", 7,
			"descriptors[0].rate_limit.replaces[0].name", "should not have an empty replaces entry"},
		{"share threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", 5,
			"descriptors[0].share_threshold", "share_threshold can only be used with wildcard values"},
		{"duplicate yaml key", "domain: d\ndomain: e\n", 2, "domain", `duplicate key "domain" (first at line 1)`},
		{"negative requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -5\n", 6,
			"descriptors[0].rate_limit.requests_per_unit", "-5 is negative"},
		{"requests beyond uint32", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 4294967296\n", 6,
			"descriptors[0].rate_limit.requests_per_unit", "want an integer from 0 to 4294967295"},
		{"float value", "domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n", 4, "descriptors[0].value", "reads as a floating-point number"},
		{"bool not bool", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", 4, "descriptors[0].shadow_mode", `want true or false, got "maybe"`},
		{"descriptors not a list", "domain: d\ndescriptors: {key: k}\n", 2, "descriptors", "want a list of descriptors, got a mapping"},
		// This project's fields.
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: magic\n", 7,
			"descriptors[0].rate_limit.algorithm", `unknown algorithm "magic"`},
		{"burst without algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      burst: 10\n", 7,
			"descriptors[0].rate_limit.burst", "burst 10 needs algorithm token_bucket or leaky_bucket"},
		{"burst on a window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: fixed_window\n      burst: 10\n", 8,
			"descriptors[0].rate_limit.burst", "which has no burst"},
		{"bucket beyond its span", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      algorithm: token_bucket\n", 5,
			"descriptors[0].rate_limit", "1 per year cannot be enforced"},
		{"algorithm on unlimited", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      algorithm: token_bucket\n", 6,
			"descriptors[0].rate_limit.algorithm", "an unlimited rule has no algorithm"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(c.yaml))
			require.Error(t, err)
			assert.Nil(t, cfg)
			var e *Error
			require.True(t, errors.As(err, &e), "%v", err)
			assert.Equal(t, "f.yaml", e.File)
			assert.Equal(t, c.line, e.Line, "%v", err)
			assert.Equal(t, c.field, e.Field, "%v", err)
			assert.Contains(t, e.Msg, c.msg)
			assert.True(t, strings.HasPrefix(err.Error(), "config: f.yaml: "), err.Error())
		})
	}
}

func TestEveryProblemIsReported(t *testing.T) {
	_, err := Parse("f.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight}\n  - value: x\n  - key: b\n    colour: red\n"))
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, "line 4, column 24: descriptors[0].rate_limit.unit: invalid rate limit unit")
	assert.Contains(t, msg, "line 5, column 5: descriptors[1].key: descriptor has empty key")
	assert.Contains(t, msg, `line 7, column 5: descriptors[2].colour: unknown key "colour"`)
}

func TestDomainsAcrossFiles(t *testing.T) {
	a := File{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	b := File{Name: "b.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 2}\n")}
	_, err := Load([]File{a, b}, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config: b.yaml: line 1, column 9: domain: duplicate domain "d" in config file (also in a.yaml`)

	cfg, err := Load([]File{a, b}, Options{MergeDomains: true})
	require.NoError(t, err)
	assert.Equal(t, 2, cfg.Len())
	_, err = Load([]File{a, a}, Options{MergeDomains: true})
	assert.ErrorContains(t, err, `duplicate descriptor composite key "d.k1" (first at a.yaml line 3)`)
}

// YAML as envoyproxy/ratelimit's parser reads it: yes/no booleans,
// numbers as string values, anchors, merge keys, nulls.
func TestYAMLAsTheyReadIt(t *testing.T) {
	_, err := Parse("f.yaml", []byte(`
domain: d
base: &base
descriptors:
  - key: port
    value: 8080
    shadow_mode: yes
    rate_limit: &lim {unit: SECOND, requests_per_unit: 1_000}
  - key: other
    rate_limit: *lim
  - key: nothing
    value:
    rate_limit:
`))
	require.Error(t, err, "base is no key of theirs")
	assert.Contains(t, err.Error(), `line 3, column 1: base: unknown key "base"`)

	cfg, err := Parse("f.yaml", []byte(`
domain: d
descriptors:
  - key: port
    value: 8080
    shadow_mode: yes
    rate_limit: &lim {unit: SECOND, requests_per_unit: 1_000}
  - key: other
    rate_limit:
      <<: *lim
      requests_per_unit: 7
  - key: nothing
    value:
    rate_limit:
`))
	require.NoError(t, err)
	m, ok := cfg.Lookup("d", []Entry{{"port", "8080"}})
	require.True(t, ok)
	assert.True(t, m.Rule.ShadowMode)
	assert.Equal(t, uint32(1000), m.Rule.RequestsPerUnit)
	assert.Equal(t, Second, m.Rule.Unit)
	m, ok = cfg.Lookup("d", []Entry{{"other", "x"}})
	require.True(t, ok)
	assert.Equal(t, uint32(7), m.Rule.RequestsPerUnit, "an explicit key wins over a merged one")
	_, ok = cfg.Lookup("d", []Entry{{"nothing", "x"}})
	assert.False(t, ok, "a null rate_limit is no limit")
}

func TestRuleLimits(t *testing.T) {
	cfg, err := Parse("f.yaml", []byte(`
domain: d
descriptors:
  - key: envoy
    rate_limit: {unit: month, requests_per_unit: 100}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 20}
  - key: window
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: sliding_window_counter}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
`))
	require.NoError(t, err)
	get := func(key string) *Rule {
		m, ok := cfg.Lookup("d", []Entry{{key, "v"}})
		require.True(t, ok, key)
		return m.Rule
	}
	r := get("envoy")
	assert.True(t, r.EnvoyCounting)
	assert.Equal(t, limit.Limit{Rate: 100, Period: 30 * 24 * time.Hour, Algorithm: limit.FixedWindow}, r.Limit)
	r = get("bucket")
	assert.False(t, r.EnvoyCounting)
	assert.Equal(t, limit.PerSecond(100).WithBurst(20), r.Limit)
	assert.Equal(t, limit.Per(60, time.Minute).WithAlgorithm(limit.SlidingWindowCounter), get("window").Limit)
	assert.Zero(t, get("blocked").Limit.Rate)
	assert.True(t, get("free").Unlimited)
	assert.Equal(t, 5, cfg.Len())
	assert.Contains(t, cfg.Dump(), "d.bucket: 100/second token_bucket burst 20 (f.yaml:7)")
}

func TestUnits(t *testing.T) {
	for _, c := range []struct {
		name string
		unit Unit
		secs int64
	}{
		{"second", Second, 1}, {"minute", Minute, 60}, {"hour", Hour, 3600}, {"day", Day, 86400},
		{"week", Week, 604800}, {"month", Month, 2592000}, {"year", Year, 31536000},
	} {
		u, ok := ParseUnit(strings.ToUpper(c.name))
		require.True(t, ok, c.name)
		assert.Equal(t, c.unit, u)
		assert.Equal(t, c.secs, u.Seconds())
		assert.Equal(t, c.name, u.String())
	}
	_, ok := ParseUnit("unknown")
	assert.False(t, ok)
	assert.False(t, UnitUnknown.Valid())
}
