package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The examples of envoyproxy/ratelimit's documentation, and its matching
// rules, one case each.
const lookupConfig = `
domain: d
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: key1
    value: value*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key1
    value: val*
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: key1
    value: valueX
    rate_limit: {unit: minute, requests_per_unit: 40}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 60}
`

func TestLookup(t *testing.T) {
	cfg, err := Parse("f.yaml", []byte(lookupConfig))
	require.NoError(t, err)
	cases := []struct {
		name                  string
		domain                string
		entries               []Entry
		rule, counter, metric string // rule "" means no match
	}{
		{"key alone matches any value", "d", []Entry{{"remote_address", "10.0.0.1"}}, "d.remote_address", "d_remote_address_10.0.0.1_", "d.remote_address"},
		{"key and value first", "d", []Entry{{"remote_address", "50.0.0.5"}}, "d.remote_address_50.0.0.5", "d_remote_address_50.0.0.5_", "d.remote_address_50.0.0.5"},
		{"nested", "d", []Entry{{"message_type", "marketing"}, {"to_number", "2061111111"}}, "d.message_type_marketing.to_number",
			"d_message_type_marketing_to_number_2061111111_", "d.message_type_marketing.to_number"},
		{"shorter than the path", "d", []Entry{{"message_type", "marketing"}}, "", "", ""},
		{"longer than the path", "d", []Entry{{"remote_address", "1.2.3.4"}, {"extra", "x"}}, "", "", ""},
		{"no such value", "d", []Entry{{"message_type", "transactional"}, {"to_number", "1"}}, "", "", ""},
		{"no such domain", "e", []Entry{{"remote_address", "1.2.3.4"}}, "", "", ""},
		{"wildcard, first written wins", "d", []Entry{{"key1", "value1"}}, "d.key1_value*", "d_key1_value1_", "d.key1_value*"},
		{"second wildcard", "d", []Entry{{"key1", "valid"}}, "d.key1_val*", "d_key1_valid_", "d.key1_val*"},
		{"exact value beats wildcards", "d", []Entry{{"key1", "valueX"}}, "d.key1_valueX", "d_key1_valueX_", "d.key1_valueX"},
		{"shared threshold counts under the pattern", "d", []Entry{{"files", "files/a.pdf"}}, "d.files_files/*", "d_files_files/*_", "d.files_files/*"},
		{"detailed metric names the value", "d", []Entry{{"detailed", "v1"}}, "d.detailed", "d_detailed_v1_", "d.detailed_v1"},
		{"value to metric", "d", []Entry{{"route", "api"}, {"method", "GET"}}, "d.route.method", "d_route_api_method_GET_", "d.route_api.method"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, ok := cfg.Lookup(c.domain, c.entries)
			if c.rule == "" {
				assert.False(t, ok, "%+v", m.Rule)
				return
			}
			require.True(t, ok)
			assert.Equal(t, c.rule, m.Rule.Key)
			assert.Equal(t, c.counter, m.Counter)
			assert.Equal(t, c.metric, m.Metric)
		})
	}
}

func TestKeys(t *testing.T) {
	es := []Entry{{"a", "1"}, {"b", ""}}
	assert.Equal(t, "d_a_1_b__", CounterKey("d", es))
	assert.Equal(t, "d.a_1.b", DescriptorKey("d", es))
}
