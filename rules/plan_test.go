package rules

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

func mustCompile(t testing.TB, yaml string) *Rules {
	t.Helper()
	cfg, err := Parse([]byte(yaml))
	require.NoError(t, err)
	r, err := Compile(cfg)
	require.NoError(t, err)
	return r
}

const planYAML = `rate_limits:
  default: {requests: 100, window: 60, algorithm: sliding_window_counter}
  global: {requests: 10000, window: 1}
  per_ip: {requests: 100, window: 60}
  per_user: {requests: 1000, window: 60}
  endpoints:
    /api/v1/search: {requests: 30, window: 60, burst: 10}
    "POST /api/v1/upload": {requests: 10, window: 3600, algorithm: sliding_window_log}
  tiers:
    free: {requests: 100, window: 3600}
    premium: {requests: 10000, window: 3600}
  ban: [203.0.113.0/24, "2001:db8::1"]
`

var client = Request{
	Method: "GET",
	Path:   "/api/v1/search",
	IP:     netip.MustParseAddr("198.51.100.7"),
	Client: "user:42",
	User:   "42",
	Tier:   "free",
}

type planned struct {
	Rule, Key string
	Limit     limit.Limit
	Shadow    bool
}

func summarize(checks []Check) []planned {
	out := make([]planned, len(checks))
	for i, c := range checks {
		out[i] = planned(c)
	}
	return out
}

func rulesOf(checks []Check) []string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.Rule
	}
	return out
}

func TestPlanOrder(t *testing.T) {
	r := mustCompile(t, planYAML)
	banned, checks := r.Plan(client, nil)
	assert.False(t, banned)
	assert.Equal(t, []planned{
		{"global", "global", limit.PerSecond(10000), false},
		{"per_ip", "per_ip|198.51.100.7", limit.PerMinute(100), false},
		{"per_user", "per_user|42", limit.PerMinute(1000), false},
		{"tier:free", "tier:free|user:42", limit.PerHour(100), false},
		{"endpoint:/api/v1/search", "endpoint:/api/v1/search|user:42", limit.PerMinute(30).WithBurst(10), false},
	}, summarize(checks))
}

func TestPlanPerIPKeysTheCallersGroup(t *testing.T) {
	rs, err := Compile(&Config{PerIP: &Rule{Requests: 2, Window: time.Hour}, Ban: []netip.Prefix{netip.MustParsePrefix("2001:db8::7/128")}})
	require.NoError(t, err)
	ip := netip.MustParseAddr("2001:db8::1")
	_, checks := rs.Plan(Request{IP: ip, IPKey: "ip:2001:db8::/64"}, nil)
	require.Len(t, checks, 1)
	assert.Equal(t, "per_ip|ip:2001:db8::/64", checks[0].Key, "the group the caller counts the client in")
	_, checks = rs.Plan(Request{IP: ip}, nil)
	assert.Equal(t, "per_ip|2001:db8::1", checks[0].Key, "else the address")
	banned, _ := rs.Plan(Request{IP: netip.MustParseAddr("2001:db8::7"), IPKey: "ip:2001:db8::/64"}, nil)
	assert.True(t, banned, "bans match the exact address, whatever the group")
}

func TestPlanSkipsWhatTheRequestLacks(t *testing.T) {
	r := mustCompile(t, planYAML)
	for _, tc := range []struct {
		name string
		req  Request
		want []string
	}{
		{"everything", client, []string{"global", "per_ip", "per_user", "tier:free", "endpoint:/api/v1/search"}},
		{"no IP", Request{Path: "/x", Client: "c"}, []string{"global", "default"}},
		{"anonymous", Request{Path: "/x", IP: client.IP, Client: "ip:198.51.100.7"}, []string{"global", "per_ip", "default"}},
		{"unknown tier", Request{Path: "/x", Client: "c", Tier: "gold"}, []string{"global", "default"}},
		{"method-specific endpoint", Request{Method: "POST", Path: "/api/v1/upload", Client: "c", Tier: "premium"}, []string{"global", "tier:premium", "endpoint:POST /api/v1/upload"}},
		{"other method: default", Request{Method: "GET", Path: "/api/v1/upload", Client: "c"}, []string{"global", "default"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, checks := r.Plan(tc.req, nil)
			assert.Equal(t, tc.want, rulesOf(checks))
		})
	}
}

func TestPlanBan(t *testing.T) {
	r := mustCompile(t, planYAML)
	for _, tc := range []struct {
		ip     string
		banned bool
	}{
		{"203.0.113.0", true},
		{"203.0.113.255", true},
		{"203.0.114.1", false},
		{"::ffff:203.0.113.9", true},
		{"2001:db8::1", true},
		{"2001:db8::1%eth0", true},
		{"2001:db8::2", false},
		{"198.51.100.7", false},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			req := client
			req.IP = netip.MustParseAddr(tc.ip)
			dst := make([]Check, 0, 8)
			banned, checks := r.Plan(req, dst)
			assert.Equal(t, tc.banned, banned)
			if tc.banned {
				assert.Empty(t, checks)
			} else {
				assert.Len(t, checks, 5)
			}
		})
	}
	banned, _ := r.Plan(Request{}, nil)
	assert.False(t, banned, "no IP is not banned")
}

func TestPlanBanManyPrefixes(t *testing.T) {
	cfg := &Config{}
	for i := range 1000 {
		cfg.Ban = append(cfg.Ban, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24+i%9))
	}
	r, err := Compile(cfg)
	require.NoError(t, err)
	banned, _ := r.Plan(Request{IP: netip.MustParseAddr("10.3.231.0")}, nil) // i = 999: /24+0
	assert.True(t, banned)
	banned, _ = r.Plan(Request{IP: netip.MustParseAddr("11.0.0.1")}, nil)
	assert.False(t, banned)
}

func TestPlanDisabled(t *testing.T) {
	r := mustCompile(t, "rate_limits:\n  enabled: false\n  global: {requests: 1, window: 1}\n  ban: [0.0.0.0/0]\n")
	assert.False(t, r.Enabled())
	banned, checks := r.Plan(client, nil)
	assert.False(t, banned)
	assert.Empty(t, checks)
}

func TestPlanEndpointMatching(t *testing.T) {
	r := mustCompile(t, `rate_limits:
  default: {requests: 1, window: 1}
  endpoints:
    /api/v1/search: {requests: 1, window: 1}
    "POST /api/v1/search": {requests: 1, window: 1}
    /api/v1/items/*: {requests: 1, window: 1}
    "DELETE /api/v1/items/*": {requests: 1, window: 1}
    /api/v1/items/special: {requests: 1, window: 1}
    /api/v1/items/special/*: {requests: 1, window: 1}
    /api/*: {requests: 1, window: 1}
    "GET /static/*": {requests: 1, window: 1}
`)
	for _, tc := range []struct {
		method, path, want string
	}{
		{"GET", "/api/v1/search", "endpoint:/api/v1/search"},
		{"POST", "/api/v1/search", "endpoint:POST /api/v1/search"},
		{"post", "/api/v1/search", "endpoint:POST /api/v1/search"},
		{"GET", "/api/v1/search/", "endpoint:/api/*"},
		{"GET", "/api/v1/items", "endpoint:/api/v1/items/*"},
		{"GET", "/api/v1/items/", "endpoint:/api/v1/items/*"},
		{"GET", "/api/v1/items/42", "endpoint:/api/v1/items/*"},
		{"GET", "/api/v1/items/42/parts", "endpoint:/api/v1/items/*"},
		{"DELETE", "/api/v1/items/42", "endpoint:DELETE /api/v1/items/*"},
		{"GET", "/api/v1/itemsX", "endpoint:/api/*"},
		{"GET", "/api/v1/items/special", "endpoint:/api/v1/items/special"},
		{"DELETE", "/api/v1/items/special", "endpoint:/api/v1/items/special"},
		{"GET", "/api/v1/items/special/x", "endpoint:/api/v1/items/special/*"},
		{"DELETE", "/api/v1/items/special/x", "endpoint:/api/v1/items/special/*"},
		{"GET", "/api", "endpoint:/api/*"},
		{"GET", "/apix", "default"},
		{"GET", "/static/app.js", "endpoint:GET /static/*"},
		{"HEAD", "/static/app.js", "default"},
		{"GET", "/", "default"},
		{"GET", "", "default"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			_, checks := r.Plan(Request{Method: tc.method, Path: tc.path, Client: "c"}, nil)
			require.Len(t, checks, 1)
			assert.Equal(t, tc.want, checks[0].Rule)
		})
	}
}

func TestPlanCatchAll(t *testing.T) {
	r := mustCompile(t, "rate_limits:\n  default: {requests: 1, window: 1}\n  endpoints:\n    /*: {requests: 2, window: 1}\n")
	for _, path := range []string{"/", "/a", "/a/b"} {
		_, checks := r.Plan(Request{Path: path}, nil)
		assert.Equal(t, []string{"endpoint:/*"}, rulesOf(checks), path)
	}
}

func TestPlanShadow(t *testing.T) {
	const rules = `rate_limits:
  shadow: %v
  global: {requests: 10, window: 1}
  per_ip: {requests: 10, window: 1, shadow: true}
  default: {requests: 10, window: 1}
  priority: {reserve: 0.5}
`
	r := mustCompile(t, fmt.Sprintf(rules, false))
	assert.False(t, r.Shadow())
	_, checks := r.Plan(client, nil)
	got := map[string]bool{}
	for _, c := range checks {
		got[c.Rule] = c.Shadow
	}
	assert.Equal(t, map[string]bool{
		"reserve:global": false, "global": false,
		"reserve:per_ip": true, "per_ip": true,
		"reserve:default": false, "default": false,
	}, got)

	r = mustCompile(t, fmt.Sprintf(rules, true))
	assert.True(t, r.Shadow())
	_, checks = r.Plan(client, nil)
	require.Len(t, checks, 6)
	for _, c := range checks {
		assert.True(t, c.Shadow, c.Rule)
	}
}

func TestPlanReserve(t *testing.T) {
	r := mustCompile(t, `rate_limits:
  global: {requests: 100, window: 1, burst: 10}
  per_ip: {requests: 3, window: 1}
  per_user: {requests: 1, window: 1}
  default: {requests: 1000, window: 60, algorithm: fixed_window}
  priority: {reserve: 0.2}
`)
	assert.Equal(t, 8, r.MaxChecks())
	_, checks := r.Plan(client, nil)
	assert.Equal(t, []planned{
		{"reserve:global", "reserve:global", limit.PerSecond(80).WithBurst(8), false},
		{"global", "global", limit.PerSecond(100).WithBurst(10), false},
		{"reserve:per_ip", "reserve:per_ip|198.51.100.7", limit.PerSecond(2), false},
		{"per_ip", "per_ip|198.51.100.7", limit.PerSecond(3), false},
		{"reserve:per_user", "reserve:per_user|42", limit.PerSecond(1), false},
		{"per_user", "per_user|42", limit.PerSecond(1), false},
		{"reserve:default", "reserve:default|user:42", limit.PerMinute(800).WithAlgorithm(limit.FixedWindow), false},
		{"default", "default|user:42", limit.PerMinute(1000).WithAlgorithm(limit.FixedWindow), false},
	}, summarize(checks))

	vip := client
	vip.Priority = true
	_, checks = r.Plan(vip, nil)
	assert.Equal(t, []string{"global", "per_ip", "per_user", "default"}, rulesOf(checks), "priority traffic skips the reserve checks")
}

func TestReserveScaling(t *testing.T) {
	for _, tc := range []struct {
		reserve     float64
		rate, burst int64
		wantRate    int64
		wantBurst   int64
	}{
		{0.2, 100, 0, 80, 0},
		{0.2, 100, 10, 80, 8},
		{0.1, 10, 3, 9, 2},
		{0.3, 10, 0, 7, 0},
		{0.7, 10, 0, 3, 0},
		{0.99, 10, 10, 1, 1},
		{0.5, 1, 1, 1, 1},
		{0.25, 1 << 46, 0, 3 << 44, 0},
		{0.000000001, 1_000_000_000, 0, 999_999_999, 0},
	} {
		t.Run(fmt.Sprint(tc.reserve, "/", tc.rate, "/", tc.burst), func(t *testing.T) {
			got := scaleLimit(limit.Limit{Rate: tc.rate, Period: time.Second, Burst: tc.burst}, reserveKeep(tc.reserve))
			assert.Equal(t, tc.wantRate, got.Rate)
			assert.Equal(t, tc.wantBurst, got.Burst)
		})
	}
}

func TestPlanAppendsToDst(t *testing.T) {
	r := mustCompile(t, planYAML)
	dst := make([]Check, 1, 1+r.MaxChecks())
	dst[0] = Check{Rule: "caller's"}
	_, checks := r.Plan(client, dst)
	require.Len(t, checks, 6)
	assert.Equal(t, "caller's", checks[0].Rule)
	assert.Same(t, &dst[:1][0], &checks[0], "dst with MaxChecks spare capacity is not grown")
}

func TestPlanKeysUnambiguous(t *testing.T) {
	// Tier names, endpoint paths and identities made of the separators.
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "a|%7C:"
	word := func() string {
		b := make([]byte, rng.IntN(5))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	cfg := &Config{
		Global:    &Rule{Requests: 1, Window: time.Second},
		PerUser:   &Rule{Requests: 1, Window: time.Second},
		Default:   &Rule{Requests: 1, Window: time.Second},
		Tiers:     map[string]Rule{},
		Endpoints: map[string]Rule{},
		Reserve:   0.5,
	}
	tiers := []string{"a", "a|b", "a%7Cb", "%", "|", "tier:a", "reserve:a"}
	for range 30 {
		if w := word(); w != "" {
			tiers = append(tiers, w)
		}
	}
	var paths []string
	for _, t := range tiers {
		paths = append(paths, "/"+t)
	}
	for _, name := range tiers {
		cfg.Tiers[name] = Rule{Requests: 1, Window: time.Second}
	}
	for _, p := range paths {
		cfg.Endpoints[p] = Rule{Requests: 1, Window: time.Second}
	}
	r, err := Compile(cfg)
	require.NoError(t, err)

	ids := []string{"", "|", "a", "a|b", "b|c", "global", "per_user|a", "%7C"}
	for range 100 {
		ids = append(ids, word())
	}
	type pair struct{ rule, id string }
	seen := map[string]pair{}
	for _, tier := range tiers {
		for _, id := range ids {
			req := Request{Tier: tier, Client: id, User: id, Path: "/" + tier}
			_, checks := r.Plan(req, nil)
			require.GreaterOrEqual(t, len(checks), 6)
			for _, c := range checks {
				p := pair{c.Rule, id}
				if c.Rule == "global" || c.Rule == "reserve:global" {
					p.id = ""
				}
				if prev, ok := seen[c.Key]; ok {
					require.Equal(t, prev, p, "key %q", c.Key)
				}
				seen[c.Key] = p
			}
		}
	}
	assert.Greater(t, len(seen), len(tiers)*len(ids))
}

func TestPlanAllocations(t *testing.T) {
	global := mustCompile(t, "rate_limits:\n  global: {requests: 1, window: 1}\n  priority: {reserve: 0.5}\n")
	full := mustCompile(t, planYAML)
	reserve := mustCompile(t, planYAML+"  priority: {reserve: 0.2}\n")
	dst := make([]Check, 0, 16)
	for _, tc := range []struct {
		name   string
		r      *Rules
		req    Request
		allocs float64
	}{
		{"global only", global, client, 0},
		{"five checks", full, client, 4},
		{"banned", full, Request{IP: netip.MustParseAddr("203.0.113.1")}, 0},
		{"reserve, normal", reserve, client, 8},
		{"reserve, priority", reserve, Request{IP: client.IP, User: "u", Client: "c", Priority: true}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := testing.AllocsPerRun(100, func() { _, _ = tc.r.Plan(tc.req, dst[:0]) })
			assert.Equal(t, tc.allocs, got)
		})
	}
}
