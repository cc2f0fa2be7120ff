package rules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// env is a lookup over a map, as os.LookupEnv over the environment.
type env map[string]string

func (e env) lookup(name string) (string, bool) {
	v, ok := e[name]
	return v, ok
}

func TestFromEnvExample(t *testing.T) {
	// Every variable set, as a deployment sets them.
	cfg, err := FromEnv(env{
		EnvEnabled:   "true",
		EnvAlgorithm: "sliding_window",
		EnvDefault:   "1000",
		EnvWindow:    "3600",
		EnvPerIP:     "100",
		EnvPerUser:   "10000",
		EnvBurst:     "50",
	}.lookup)
	require.NoError(t, err)
	assert.False(t, cfg.Disabled)
	assert.Equal(t, limit.Per(1000, time.Hour).WithAlgorithm(limit.SlidingWindowCounter), cfg.Default.Limit(),
		"RATE_LIMIT_BURST is ignored for a window algorithm")
	assert.Equal(t, limit.Per(100, time.Hour).WithAlgorithm(limit.SlidingWindowCounter), cfg.PerIP.Limit())
	assert.Equal(t, limit.Per(10000, time.Hour).WithAlgorithm(limit.SlidingWindowCounter), cfg.PerUser.Limit())
	_, err = Compile(cfg)
	require.NoError(t, err)
}

func TestFromEnvEachVariable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   env
		check func(t *testing.T, c *Config)
	}{
		{"nothing set", env{}, func(t *testing.T, c *Config) {
			assert.Equal(t, &Config{}, c)
		}},
		{"empty values are unset", env{EnvEnabled: " ", EnvDefault: ""}, func(t *testing.T, c *Config) {
			assert.Equal(t, &Config{}, c)
		}},
		{"enabled false", env{EnvEnabled: "false"}, func(t *testing.T, c *Config) {
			assert.True(t, c.Disabled)
		}},
		{"enabled 1", env{EnvEnabled: "1"}, func(t *testing.T, c *Config) {
			assert.False(t, c.Disabled)
		}},
		{"default and window", env{EnvDefault: "10", EnvWindow: "60"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.PerMinute(10), c.Default.Limit())
		}},
		{"window as a duration", env{EnvDefault: "10", EnvWindow: "1m30s"}, func(t *testing.T, c *Config) {
			assert.Equal(t, 90*time.Second, c.Default.Window)
		}},
		{"algorithm", env{EnvDefault: "10", EnvWindow: "60", EnvAlgorithm: "fixed_window"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.FixedWindow, c.Default.Algorithm)
		}},
		{"burst on a bucket", env{EnvDefault: "10", EnvWindow: "60", EnvBurst: "50"}, func(t *testing.T, c *Config) {
			assert.Equal(t, int64(50), c.Default.Burst)
		}},
		{"burst on a leaky bucket", env{EnvDefault: "10", EnvWindow: "60", EnvBurst: "5", EnvAlgorithm: "leaky_bucket"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.Per(10, time.Minute).WithBurst(5).WithAlgorithm(limit.LeakyBucket), c.Default.Limit())
		}},
		{"burst ignored on a window algorithm", env{EnvDefault: "10", EnvWindow: "60", EnvBurst: "50", EnvAlgorithm: "sliding_window_log"}, func(t *testing.T, c *Config) {
			assert.Zero(t, c.Default.Burst)
		}},
		{"per_ip alone", env{EnvPerIP: "100", EnvWindow: "60"}, func(t *testing.T, c *Config) {
			assert.Nil(t, c.Default)
			assert.Equal(t, limit.PerMinute(100), c.PerIP.Limit())
		}},
		{"per_user alone", env{EnvPerUser: "1000", EnvWindow: "60", EnvAlgorithm: "sliding_window_counter"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.PerMinute(1000).WithAlgorithm(limit.SlidingWindowCounter), c.PerUser.Limit())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := FromEnv(tc.env.lookup)
			require.NoError(t, err)
			tc.check(t, cfg)
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  env
		want string
	}{
		{"enabled not a bool", env{EnvEnabled: "maybe"},
			`rules: RATE_LIMIT_ENABLED="maybe": rate_limits.enabled: want true or false`},
		{"unknown algorithm", env{EnvDefault: "1", EnvWindow: "1", EnvAlgorithm: "magic"},
			`rules: RATE_LIMIT_ALGORITHM="magic": unknown algorithm "magic", want one of token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter`},
		{"default not a number", env{EnvDefault: "lots", EnvWindow: "60"},
			`rules: RATE_LIMIT_DEFAULT="lots": rate_limits.default.requests: want an integer`},
		{"default zero", env{EnvDefault: "0", EnvWindow: "60"},
			`rules: RATE_LIMIT_DEFAULT="0": rate_limits.default.requests: must be positive, got 0`},
		{"per_ip negative", env{EnvPerIP: "-3", EnvWindow: "60"},
			`rules: RATE_LIMIT_PER_IP="-3": rate_limits.per_ip.requests: must be positive, got -3`},
		{"per_user not a number", env{EnvPerUser: "1e3", EnvWindow: "60"},
			`rules: RATE_LIMIT_PER_USER="1e3": rate_limits.per_user.requests: want an integer`},
		{"window bad", env{EnvDefault: "10", EnvWindow: "hourly"},
			`rules: RATE_LIMIT_WINDOW="hourly": want seconds or a duration such as "1m", got "hourly"`},
		{"window zero", env{EnvDefault: "10", EnvWindow: "0"},
			`rules: RATE_LIMIT_WINDOW="0": rate_limits.default.window: must be positive, got 0`},
		{"burst not a number", env{EnvDefault: "10", EnvWindow: "60", EnvBurst: "x"},
			`rules: RATE_LIMIT_BURST="x": rate_limits.default.burst: want an integer`},
		{"burst negative", env{EnvDefault: "10", EnvWindow: "60", EnvBurst: "-1"},
			`rules: RATE_LIMIT_BURST="-1": rate_limits.default.burst: must not be negative, got -1`},
		{"default without a window", env{EnvDefault: "10"},
			`rules: RATE_LIMIT_DEFAULT="10": rate_limits.default.window: required: set RATE_LIMIT_WINDOW or rate_limits.default.window`},
		{"per_ip without a window", env{EnvPerIP: "10"},
			`rules: RATE_LIMIT_PER_IP="10": rate_limits.per_ip.window: required: set RATE_LIMIT_WINDOW`},
		{"window for no rule", env{EnvWindow: "60"},
			`rules: RATE_LIMIT_WINDOW="60": applies to no rule: set RATE_LIMIT_DEFAULT, RATE_LIMIT_PER_IP or RATE_LIMIT_PER_USER, or give the file a default rule`},
		{"burst for no rule", env{EnvPerIP: "10", EnvWindow: "60", EnvBurst: "5"},
			`rules: RATE_LIMIT_BURST="5": applies to no rule: the burst is the default rule's; set RATE_LIMIT_DEFAULT or give the file a default rule`},
		{"limit invalid as a whole", env{EnvDefault: "200000", EnvWindow: "60", EnvAlgorithm: "sliding_window_log"},
			`rules: RATE_LIMIT_DEFAULT="200000": rate_limits.default: invalid limit: rate 200000 exceeds 100000 for sliding_window_log, which stores one timestamp per request; use sliding_window_counter (set by RATE_LIMIT_WINDOW="60", RATE_LIMIT_ALGORITHM="sliding_window_log")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := FromEnv(tc.env.lookup)
			assert.Nil(t, cfg)
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}

func TestApplyEnvOverlay(t *testing.T) {
	const file = `rate_limits:
  enabled: true
  default: {requests: 100, window: 60, algorithm: token_bucket, burst: 20}
  per_ip: {requests: 50, window: 10, algorithm: leaky_bucket}
  tiers:
    free: {requests: 5, window: 1}
`
	for _, tc := range []struct {
		name  string
		env   env
		check func(t *testing.T, c *Config)
	}{
		{"no variables: the file", env{}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.PerMinute(100).WithBurst(20), c.Default.Limit())
			assert.Equal(t, limit.Per(50, 10*time.Second).WithAlgorithm(limit.LeakyBucket), c.PerIP.Limit())
			assert.Nil(t, c.PerUser)
		}},
		{"enabled wins", env{EnvEnabled: "false"}, func(t *testing.T, c *Config) {
			assert.True(t, c.Disabled)
		}},
		{"default requests win, the file keeps the rest", env{EnvDefault: "7"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.PerMinute(7).WithBurst(20), c.Default.Limit())
		}},
		{"window wins for default, per_ip keeps its own", env{EnvWindow: "5"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.Per(100, 5*time.Second).WithBurst(20), c.Default.Limit())
			assert.Equal(t, 10*time.Second, c.PerIP.Window)
		}},
		{"per_ip requests win, and the env window with them", env{EnvPerIP: "9", EnvWindow: "30"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.Per(9, 30*time.Second).WithAlgorithm(limit.LeakyBucket), c.PerIP.Limit())
		}},
		{"per_ip requests win, file window kept", env{EnvPerIP: "9"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.Per(9, 10*time.Second).WithAlgorithm(limit.LeakyBucket), c.PerIP.Limit())
		}},
		{"per_user created from the default's window and algorithm", env{EnvPerUser: "3"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.PerMinute(3), c.PerUser.Limit())
		}},
		{"burst wins", env{EnvBurst: "33"}, func(t *testing.T, c *Config) {
			assert.Equal(t, int64(33), c.Default.Burst)
		}},
		{"window algorithm drops the file's burst", env{EnvAlgorithm: "fixed_window"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.PerMinute(100).WithAlgorithm(limit.FixedWindow), c.Default.Limit())
			assert.Equal(t, limit.LeakyBucket, c.PerIP.Algorithm, "per_ip is not shaped without RATE_LIMIT_PER_IP")
		}},
		{"tiers untouched", env{EnvDefault: "1", EnvWindow: "1"}, func(t *testing.T, c *Config) {
			assert.Equal(t, limit.PerSecond(5), c.Tiers["free"].Limit())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(file))
			require.NoError(t, err)
			require.NoError(t, cfg.ApplyEnv(tc.env.lookup))
			tc.check(t, cfg)
			_, err = Compile(cfg)
			require.NoError(t, err)
		})
	}
}

func TestApplyEnvLeavesConfigOnError(t *testing.T) {
	cfg, err := Parse([]byte("rate_limits:\n  default: {requests: 100, window: 60}\n"))
	require.NoError(t, err)
	before := *cfg.Default
	err = cfg.ApplyEnv(env{EnvDefault: "5", EnvWindow: "0"}.lookup)
	require.Error(t, err)
	assert.Equal(t, before, *cfg.Default, "a failed overlay changes nothing")
	assert.Equal(t, `rules: RATE_LIMIT_WINDOW="0": rate_limits.default.window: must be positive, got 0`, err.Error())
}

func TestApplyEnvErrorNamesFileLine(t *testing.T) {
	// The file's window and the environment's requests make a limit that
	// cannot be enforced: the error names where each came from.
	cfg, err := Parse([]byte("rate_limits:\n  default: {requests: 100, window: 60, algorithm: sliding_window_log}\n"))
	require.NoError(t, err)
	err = cfg.ApplyEnv(env{EnvDefault: "500000"}.lookup)
	require.Error(t, err)
	assert.Equal(t, `rules: line 2, column 3: rate_limits.default: invalid limit: rate 500000 exceeds 100000 for sliding_window_log, which stores one timestamp per request; use sliding_window_counter (set by RATE_LIMIT_DEFAULT="500000")`, err.Error())
}

func TestLoadPrecedence(t *testing.T) {
	path := writeFile(t, t.TempDir(), "rules.yaml", "rate_limits:\n  default: {requests: 100, window: 60}\n")
	r, err := Load(path, env{EnvDefault: "5"}.lookup)
	require.NoError(t, err)
	_, checks := r.Plan(Request{Client: "c"}, nil)
	require.Len(t, checks, 1)
	assert.Equal(t, limit.PerMinute(5), checks[0].Limit, "the environment wins over the file")

	r, err = Load(path, nil)
	require.NoError(t, err)
	_, checks = r.Plan(Request{Client: "c"}, nil)
	assert.Equal(t, limit.PerMinute(100), checks[0].Limit)

	r, err = Load("", env{EnvDefault: "5", EnvWindow: "1"}.lookup)
	require.NoError(t, err)
	_, checks = r.Plan(Request{Client: "c"}, nil)
	assert.Equal(t, limit.PerSecond(5), checks[0].Limit)

	_, err = Load(path+".missing", nil)
	require.Error(t, err)
}
