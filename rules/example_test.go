package rules_test

import (
	"fmt"
	"net/netip"

	"github.com/hybridlimit/hybridlimit/rules"
)

// Rules from YAML, then the checks one request must pass, in order.
func ExampleRules_Plan() {
	cfg, err := rules.Parse([]byte(`
rate_limits:
  default: {requests: 100, window: 60}
  global: {requests: 10000, window: 1}
  per_ip: {requests: 300, window: 60}
  endpoints:
    "POST /api/v1/upload": {requests: 10, window: 3600, algorithm: sliding_window_log}
  tiers:
    free: {requests: 1000, window: 3600}
  ban: [203.0.113.0/24]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	rs, err := rules.Compile(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	req := rules.Request{Method: "POST", Path: "/api/v1/upload", IP: netip.MustParseAddr("198.51.100.7"),
		Client: "user:42", User: "42", Tier: "free"}
	_, checks := rs.Plan(req, nil)
	for _, c := range checks {
		fmt.Printf("%-38s %s\n", c.Key, c.Limit)
	}

	req.IP = netip.MustParseAddr("203.0.113.9")
	banned, _ := rs.Plan(req, nil)
	fmt.Println("banned:", banned)
	// Output:
	// global                                 10000/1s burst 10000 token_bucket
	// per_ip|198.51.100.7                    300/1m0s burst 300 token_bucket
	// tier:free|user:42                      1000/1h0m0s burst 1000 token_bucket
	// endpoint:POST /api/v1/upload|user:42   10/1h0m0s sliding_window_log
	// banned: true
}

// A broken file is refused with every problem named by line and field.
func ExampleParse_errors() {
	_, err := rules.Parse([]byte(`
rate_limits:
  default: {requests: -5, window: 60}
  endpoints:
    /search: {requests: 10, window: 60, algorithm: magic}
`))
	fmt.Println(err)
	// Output:
	// rules: line 3, column 23: rate_limits.default.requests: must be positive, got -5
	// rules: line 5, column 52: rate_limits.endpoints./search.algorithm: unknown algorithm "magic", want one of token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter
}
