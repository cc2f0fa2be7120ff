package rules

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// basicYAML is the three-part configuration most rate limiters document
// (a default, endpoints, tiers), in the shape the rules file started from.
const basicYAML = `rate_limits:
  # Global default
  default:
    requests: 100
    window: 60  # seconds
    algorithm: sliding_window_counter

  # By endpoint
  endpoints:
    /api/v1/search:
      requests: 30
      window: 60
      algorithm: token_bucket
      burst: 10

    /api/v1/upload:
      requests: 10
      window: 3600
      algorithm: sliding_window_log

  # By client tier
  tiers:
    free:
      requests: 100
      window: 3600
    premium:
      requests: 10000
      window: 3600
    enterprise:
      requests: 100000
      window: 3600
`

// fullYAML is every field of the extended shape.
const fullYAML = `rate_limits:
  enabled: true
  shadow: false
  default:
    requests: 100
    window: 60
    algorithm: sliding_window_counter
    shadow: true
  global: {requests: 10000, window: 1}
  per_ip: {requests: 100, window: 60}
  per_user: {requests: 1000, window: 1m}
  endpoints:
    /api/v1/search:
      requests: 30
      window: 60
      algorithm: token_bucket
      burst: 10
    "POST /api/v1/upload":
      requests: 10
      window: 3600
      algorithm: sliding_window_log
    "/api/v1/items/*":
      requests: 50
      window: 60
  tiers:
    free: {requests: 100, window: 3600}
    premium: {requests: 10000, window: 3600}
    enterprise: {requests: 100000, window: 3600}
  ban:
    - 203.0.113.0/24
    - 2001:db8::1
  penalty:
    strikes: 3
    within: 60
    base: 10
    max: 3600
  priority:
    reserve: 0.2
`

func TestParseBasicYAML(t *testing.T) {
	cfg, err := Parse([]byte(basicYAML))
	require.NoError(t, err)

	assert.False(t, cfg.Disabled)
	require.NotNil(t, cfg.Default)
	assert.Equal(t, limit.Limit{Rate: 100, Period: time.Minute, Algorithm: limit.SlidingWindowCounter}, cfg.Default.Limit())
	assert.Nil(t, cfg.Global)
	want := map[string]limit.Limit{
		"/api/v1/search": {Rate: 30, Period: time.Minute, Burst: 10, Algorithm: limit.TokenBucket},
		"/api/v1/upload": {Rate: 10, Period: time.Hour, Algorithm: limit.SlidingWindowLog},
	}
	require.Len(t, cfg.Endpoints, len(want))
	for name, l := range want {
		assert.Equal(t, l, cfg.Endpoints[name].Limit(), name)
	}
	tiers := map[string]limit.Limit{
		"free":       limit.Per(100, time.Hour),
		"premium":    limit.Per(10000, time.Hour),
		"enterprise": limit.Per(100000, time.Hour),
	}
	require.Len(t, cfg.Tiers, len(tiers))
	for name, l := range tiers {
		assert.Equal(t, l, cfg.Tiers[name].Limit(), name)
	}
	_, err = Compile(cfg)
	require.NoError(t, err)
}

func TestParseFullYAML(t *testing.T) {
	cfg, err := Parse([]byte(fullYAML))
	require.NoError(t, err)

	assert.True(t, cfg.Default.Shadow)
	assert.Equal(t, limit.Per(10000, time.Second), cfg.Global.Limit())
	assert.Equal(t, limit.Per(100, time.Minute), cfg.PerIP.Limit())
	assert.Equal(t, limit.Per(1000, time.Minute), cfg.PerUser.Limit())
	assert.Equal(t, limit.Per(50, time.Minute), cfg.Endpoints["/api/v1/items/*"].Limit())
	assert.Equal(t, limit.SlidingWindowLog, cfg.Endpoints["POST /api/v1/upload"].Algorithm)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::1/128")}, cfg.Ban)
	require.NotNil(t, cfg.Penalty)
	assert.Equal(t, 3, cfg.Penalty.Strikes)
	assert.Equal(t, time.Minute, cfg.Penalty.Within)
	assert.Equal(t, 10*time.Second, cfg.Penalty.Base)
	assert.Equal(t, time.Hour, cfg.Penalty.Max)
	assert.Equal(t, 0.2, cfg.Reserve)

	r, err := Compile(cfg)
	require.NoError(t, err)
	pc, ok := r.Penalty()
	require.True(t, ok)
	assert.Equal(t, 3, pc.Strikes)
	assert.Equal(t, 0.2, r.Reserve())
	assert.Equal(t, 10, r.MaxChecks())
}

func TestParseAlgorithms(t *testing.T) {
	for _, tc := range []struct {
		name string
		want limit.Algorithm
	}{
		{"token_bucket", limit.TokenBucket},
		{"leaky_bucket", limit.LeakyBucket},
		{"fixed_window", limit.FixedWindow},
		{"sliding_window_log", limit.SlidingWindowLog},
		{"sliding_window_counter", limit.SlidingWindowCounter},
		{"sliding_window", limit.SlidingWindowCounter},
		{"Token-Bucket", limit.TokenBucket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte("rate_limits:\n  default: {requests: 10, window: 60, algorithm: " + tc.name + "}\n"))
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.Default.Algorithm)
		})
	}
	cfg, err := Parse([]byte("rate_limits:\n  default: {requests: 10, window: 60}\n"))
	require.NoError(t, err)
	assert.Equal(t, limit.TokenBucket, cfg.Default.Algorithm, "the default algorithm")
}

func TestParseWindow(t *testing.T) {
	for _, tc := range []struct {
		window string
		want   time.Duration
	}{
		{"60", time.Minute},
		{"1", time.Second},
		{"0.5", 500 * time.Millisecond},
		{"1.25", 1250 * time.Millisecond},
		{"1e2", 100 * time.Second},
		{"1_000", 1000 * time.Second},
		{"1m", time.Minute},
		{"1h30m", 90 * time.Minute},
		{"250ms", 250 * time.Millisecond},
		{`"60"`, time.Minute},
		{`"2m"`, 2 * time.Minute},
	} {
		t.Run(tc.window, func(t *testing.T) {
			cfg, err := Parse([]byte("rate_limits:\n  default: {requests: 10, window: " + tc.window + "}\n"))
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.Default.Window)
		})
	}
}

func TestParseEnabledAndShadow(t *testing.T) {
	cfg, err := Parse([]byte("rate_limits:\n  enabled: false\n  shadow: true\n"))
	require.NoError(t, err)
	assert.True(t, cfg.Disabled)
	assert.True(t, cfg.Shadow)

	cfg, err = Parse([]byte("rate_limits: {}\n"))
	require.NoError(t, err)
	assert.False(t, cfg.Disabled, "enabled defaults to true")

	cfg, err = Parse([]byte("rate_limits:\n  default:\n  ban:\n"))
	require.NoError(t, err, "null reads as absent")
	assert.Nil(t, cfg.Default)
}

func TestParseAliases(t *testing.T) {
	cfg, err := Parse([]byte(`rate_limits:
  tiers:
    free: &std {requests: 100, window: 3600}
    trial: *std
`))
	require.NoError(t, err)
	assert.Equal(t, cfg.Tiers["free"].Limit(), cfg.Tiers["trial"].Limit())
}

func TestParseBanForms(t *testing.T) {
	cfg, err := Parse([]byte(`rate_limits:
  ban:
    - 203.0.113.0/24
    - 198.51.100.7
    - 10.1.2.3/8
    - 2001:db8::/32
    - ::ffff:192.0.2.1
`))
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{
		netip.MustParsePrefix("203.0.113.0/24"),
		netip.MustParsePrefix("198.51.100.7/32"),
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("192.0.2.1/32"),
	}, cfg.Ban)
}

// configErrors returns the ConfigErrors joined in err.
func configErrors(t *testing.T, err error) []*ConfigError {
	t.Helper()
	require.Error(t, err)
	var out []*ConfigError
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var ce *ConfigError
		if errors.As(err, &ce) {
			out = append(out, ce)
		}
	}
	walk(err)
	require.NotEmpty(t, out, "no ConfigError in %v", err)
	return out
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		line int
		path string
		msg  string
	}{
		{
			name: "broken YAML: unclosed bracket",
			yaml: "rate_limits:\n  default: {requests: 10, window: 60\n  global: {requests: 1, window: 1}\n",
			line: 2, msg: "invalid YAML: did not find expected ',' or '}'",
		},
		{
			name: "broken YAML: unclosed sequence",
			yaml: "rate_limits:\n  enabled: true\n  ban: [10.0.0.1, 10.0.0.2\n  shadow: false\n",
			line: 3, msg: "invalid YAML: did not find expected ',' or ']'",
		},
		{
			name: "broken YAML: tab indentation",
			yaml: "rate_limits:\n\tenabled: true\n",
			line: 2, msg: "invalid YAML: found character that cannot start any token",
		},
		{
			name: "unknown field",
			yaml: "rate_limits:\n  default:\n    requests: 10\n    window: 60\n    burts: 5\n",
			line: 5, path: "rate_limits.default.burts", msg: "unknown field",
		},
		{
			name: "unknown top-level field",
			yaml: "rate_limits: {}\nratelimits: {}\n",
			line: 2, path: "ratelimits", msg: "unknown field",
		},
		{
			name: "unknown rate_limits field",
			yaml: "rate_limits:\n  defaults: {requests: 1, window: 1}\n",
			line: 2, path: "rate_limits.defaults", msg: "unknown field",
		},
		{
			name: "unknown algorithm",
			yaml: "rate_limits:\n  default:\n    requests: 10\n    window: 60\n    algorithm: leaky_window\n",
			line: 5, path: "rate_limits.default.algorithm", msg: `unknown algorithm "leaky_window"`,
		},
		{
			name: "negative requests",
			yaml: "rate_limits:\n  endpoints:\n    /api/v1/search:\n      window: 60\n      algorithm: token_bucket\n      burst: 10\n      requests: -5\n",
			line: 7, path: "rate_limits.endpoints./api/v1/search.requests", msg: "must be positive, got -5",
		},
		{
			name: "zero window",
			yaml: "rate_limits:\n  tiers:\n    free:\n      requests: 100\n      window: 0\n",
			line: 5, path: "rate_limits.tiers.free.window", msg: "must be positive, got 0",
		},
		{
			name: "negative duration window",
			yaml: "rate_limits:\n  global: {requests: 1, window: -1m}\n",
			line: 2, path: "rate_limits.global.window", msg: "must be positive, got -1m",
		},
		{
			name: "bad window",
			yaml: "rate_limits:\n  global: {requests: 1, window: soon}\n",
			line: 2, path: "rate_limits.global.window", msg: `want seconds or a duration such as "1m", got "soon"`,
		},
		{
			name: "burst on a window algorithm",
			yaml: "rate_limits:\n  default:\n    requests: 100\n    window: 60\n    algorithm: sliding_window_counter\n    burst: 20\n",
			line: 6, path: "rate_limits.default.burst", msg: "burst is only for token_bucket and leaky_bucket, not sliding_window_counter",
		},
		{
			name: "zero burst",
			yaml: "rate_limits:\n  default:\n    requests: 100\n    window: 60\n    burst: 0\n",
			line: 5, path: "rate_limits.default.burst", msg: "must be positive, got 0",
		},
		{
			name: "bad CIDR",
			yaml: "rate_limits:\n  ban:\n    - 203.0.113.0/24\n    - 300.1.2.0/24\n",
			line: 4, path: "rate_limits.ban[1]", msg: `want an address or CIDR, got "300.1.2.0/24"`,
		},
		{
			name: "prefix length out of range",
			yaml: "rate_limits:\n  ban: [10.0.0.0/33]\n",
			line: 2, path: "rate_limits.ban[0]", msg: "want an address or CIDR",
		},
		{
			name: "reserve 1.5",
			yaml: "rate_limits:\n  priority:\n    reserve: 1.5\n",
			line: 3, path: "rate_limits.priority.reserve", msg: "must be in [0, 1), got 1.5",
		},
		{
			name: "reserve negative",
			yaml: "rate_limits:\n  priority: {reserve: -0.1}\n",
			line: 2, path: "rate_limits.priority.reserve", msg: "must be in [0, 1), got -0.1",
		},
		{
			name: "missing requests",
			yaml: "rate_limits:\n  per_ip:\n    window: 60\n",
			line: 2, path: "rate_limits.per_ip.requests", msg: "required",
		},
		{
			name: "requests not an integer",
			yaml: "rate_limits:\n  per_ip: {requests: 1.5, window: 60}\n",
			line: 2, path: "rate_limits.per_ip.requests", msg: "want a whole number, got 1.5",
		},
		{
			name: "requests a string",
			yaml: "rate_limits:\n  per_ip: {requests: many, window: 60}\n",
			line: 2, path: "rate_limits.per_ip.requests", msg: `want an integer, got "many"`,
		},
		{
			name: "requests overflow",
			yaml: "rate_limits:\n  per_ip: {requests: 99999999999999999999, window: 60}\n",
			line: 2, path: "rate_limits.per_ip.requests", msg: "out of range",
		},
		{
			name: "duplicate key",
			yaml: "rate_limits:\n  global: {requests: 1, window: 1}\n  global: {requests: 2, window: 1}\n",
			line: 3, path: "rate_limits.global", msg: "duplicate key, first at line 2",
		},
		{
			name: "same endpoint twice",
			yaml: "rate_limits:\n  endpoints:\n    \"POST /a\": {requests: 1, window: 1}\n    \"post  /a\": {requests: 1, window: 1}\n",
			line: 4, path: `rate_limits.endpoints."post  /a"`, msg: `same endpoint as "POST /a"`,
		},
		{
			name: "bad endpoint pattern",
			yaml: "rate_limits:\n  endpoints:\n    /a/*/b: {requests: 1, window: 1}\n",
			line: 3, path: "rate_limits.endpoints./a/*/b", msg: "* is allowed only as a final /* segment",
		},
		{
			name: "endpoint without slash",
			yaml: "rate_limits:\n  endpoints:\n    api: {requests: 1, window: 1}\n",
			line: 3, path: "rate_limits.endpoints.api", msg: "must start with /",
		},
		{
			name: "limit invalid as a whole",
			yaml: "rate_limits:\n  default: {requests: 200000, window: 60, algorithm: sliding_window_log}\n",
			line: 2, path: "rate_limits.default", msg: "invalid limit: rate 200000 exceeds 100000",
		},
		{
			name: "penalty max below base",
			yaml: "rate_limits:\n  penalty:\n    strikes: 3\n    within: 60\n    base: 10\n    max: 5\n",
			line: 6, path: "rate_limits.penalty.max", msg: "must be at least base (10s), got 5s",
		},
		{
			name: "penalty strikes out of range",
			yaml: "rate_limits:\n  penalty: {strikes: 1000, within: 60, base: 10, max: 60}\n",
			line: 2, path: "rate_limits.penalty.strikes", msg: "must be between 1 and 100, got 1000",
		},
		{
			name: "penalty missing field",
			yaml: "rate_limits:\n  penalty: {strikes: 3, within: 60, base: 10}\n",
			line: 2, path: "rate_limits.penalty.max", msg: "required",
		},
		{
			name: "not a mapping",
			yaml: "rate_limits:\n  default: [1, 2]\n",
			line: 2, path: "rate_limits.default", msg: "want a mapping, got a sequence",
		},
		{
			name: "bool wanted",
			yaml: "rate_limits:\n  enabled: sometimes\n",
			line: 2, path: "rate_limits.enabled", msg: `want true or false, got "sometimes"`,
		},
		{
			name: "merge key",
			yaml: "rate_limits:\n  tiers:\n    free: &f {requests: 1, window: 1}\n    paid:\n      <<: *f\n      requests: 2\n",
			line: 5, path: "rate_limits.tiers.paid", msg: "merge keys (<<) are not supported",
		},
		{
			name: "missing rate_limits",
			yaml: "limits: {}\n",
			line: 1, path: "limits", msg: "unknown field",
		},
		{
			name: "two documents",
			yaml: "rate_limits: {}\n---\nrate_limits: {}\n",
			line: 2, msg: "more than one YAML document",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.yaml))
			assert.Nil(t, cfg)
			errs := configErrors(t, err)
			e := errs[0]
			assert.Equal(t, tc.line, e.Line, "%v", err)
			assert.Equal(t, tc.path, e.Path, "%v", err)
			assert.Contains(t, e.Msg, tc.msg)
			assert.True(t, strings.HasPrefix(err.Error(), "rules: line "), "%q", err.Error())
			if tc.path != "" {
				assert.Contains(t, err.Error(), tc.path+": ")
			}
		})
	}
}

func TestParseErrorMessage(t *testing.T) {
	_, err := Parse([]byte("rate_limits:\n  endpoints:\n    /api/v1/search:\n      window: 60\n      algorithm: token_bucket\n      burst: 10\n      requests: -5\n"))
	require.Error(t, err)
	assert.Equal(t, "rules: line 7, column 17: rate_limits.endpoints./api/v1/search.requests: must be positive, got -5", err.Error())
}

func TestParseEmpty(t *testing.T) {
	for _, doc := range []string{"", "# only a comment\n", "~\n", "rate_limits:\n"} {
		_, err := Parse([]byte(doc))
		require.Error(t, err, "%q", doc)
		assert.True(t, strings.HasPrefix(err.Error(), "rules: "), "%q: %v", doc, err)
	}
}

func TestParseReportsAllErrors(t *testing.T) {
	_, err := Parse([]byte(`rate_limits:
  default:
    requests: -1
    window: 0
  tiers:
    free: {requests: 0, window: 60, algorithm: nope}
  ban: [not-an-ip]
  priority: {reserve: 1.5}
  bogus: 1
`))
	errs := configErrors(t, err)
	var lines []int
	for _, e := range errs {
		lines = append(lines, e.Line)
	}
	assert.Equal(t, []int{3, 4, 6, 6, 7, 8, 9}, lines, "%v", err)
}

func TestParseCapsErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("rate_limits:\n  tiers:\n")
	for i := range 50 {
		b.WriteString("    t")
		b.WriteString(strings.Repeat("x", i))
		b.WriteString(": {requests: -1, window: 60}\n")
	}
	_, err := Parse([]byte(b.String()))
	require.Error(t, err)
	joined, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok)
	errs := joined.Unwrap()
	require.Len(t, errs, MaxErrors+1)
	assert.Equal(t, "rules: 30 more errors not shown", errs[MaxErrors].Error())
}

func TestParseFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte("rate_limits:\n  global: {requests: 0, window: 1}\n"), 0o600))
	_, err := ParseFile(path)
	require.Error(t, err)
	assert.Equal(t, "rules: "+path+": line 2, column 22: rate_limits.global.requests: must be positive, got 0", err.Error())

	_, err = ParseFile(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.True(t, strings.HasPrefix(err.Error(), "rules: "))
}

func TestConfigValidateInCode(t *testing.T) {
	cfg := &Config{
		Default: &Rule{Requests: 0, Window: time.Minute},
		Tiers:   map[string]Rule{"free": {Requests: 10, Window: time.Minute, Algorithm: limit.FixedWindow, Burst: 5}},
		Reserve: 1,
	}
	_, err := Compile(cfg)
	require.Error(t, err)
	assert.Equal(t, "rules: rate_limits.default.requests: must be positive, got 0\n"+
		"rules: rate_limits.tiers.free.burst: burst is only for token_bucket and leaky_bucket, not fixed_window\n"+
		"rules: rate_limits.priority.reserve: must be in [0, 1), got 1", err.Error())

	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Zero(t, ce.Line)

	_, err = Compile(&Config{Global: &Rule{Requests: 10, Window: time.Nanosecond * 1500, Algorithm: limit.FixedWindow}})
	require.ErrorIs(t, err, limit.ErrInvalidLimit)
}

// A window may be a calendar unit, in a zone: a quota per day, week, month
// or year, fixed_window unless the rule says otherwise.
func TestParseCalendarWindow(t *testing.T) {
	cfg, err := Parse([]byte(`rate_limits:
  default: {requests: 1000, window: month, zone: Europe/Paris}
  per_user: {requests: 50, window: Day, algorithm: sliding_window_counter}
  tiers:
    free: {requests: 100000, window: year, zone: America/New_York}
`))
	require.NoError(t, err)
	assert.Equal(t, limit.PerCalendar(1000, limit.Month, "Europe/Paris"), cfg.Default.Limit())
	assert.Equal(t, limit.PerCalendar(50, limit.Day, "").WithAlgorithm(limit.SlidingWindowCounter), cfg.PerUser.Limit())
	assert.Equal(t, limit.PerCalendar(100000, limit.Year, "America/New_York"), cfg.Tiers["free"].Limit())
	_, err = Compile(cfg)
	require.NoError(t, err)

	for _, tc := range []struct {
		yaml, path, msg string
		line            int
	}{
		{"rate_limits:\n  default: {requests: 10, window: month, zone: Mars/Olympus}\n", "rate_limits.default.zone", `unknown time zone "Mars/Olympus"`, 2},
		{"rate_limits:\n  default: {requests: 10, window: 60, zone: Europe/Paris}\n", "rate_limits.default.zone", "a zone needs a calendar window", 2},
		{"rate_limits:\n  default: {requests: 10, window: week, algorithm: token_bucket}\n", "rate_limits.default", "calendar windows need fixed_window or sliding_window_counter", 2},
		{"rate_limits:\n  default: {requests: 10, window: fortnight}\n", "rate_limits.default.window", "fortnight", 2},
	} {
		_, err := Parse([]byte(tc.yaml))
		errs := configErrors(t, err)
		assert.Equal(t, tc.path, errs[0].Path, "%v", err)
		assert.Equal(t, tc.line, errs[0].Line, "%v", err)
		assert.Contains(t, errs[0].Msg, tc.msg)
	}
}
