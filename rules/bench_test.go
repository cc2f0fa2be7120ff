package rules

import (
	"net/netip"
	"testing"
)

// BenchmarkPlan measures planning one request, the cost every request pays
// before its checks. Keys cost one allocation each, except the global
// rule's, which are constant.
func BenchmarkPlan(b *testing.B) {
	full := mustCompile(b, planYAML)
	reserve := mustCompile(b, planYAML+"  priority: {reserve: 0.2}\n")
	global := mustCompile(b, "rate_limits:\n  global: {requests: 1, window: 1}\n")
	vip := client
	vip.Priority = true
	for _, bc := range []struct {
		name string
		r    *Rules
		req  Request
	}{
		{"global_only", global, client},
		{"banned", full, Request{IP: netip.MustParseAddr("203.0.113.1")}},
		{"five_checks", full, client},
		{"default_no_endpoint_match", full, Request{Method: "GET", Path: "/some/long/path/that/matches/nothing", IP: client.IP, Client: "user:42", User: "42", Tier: "free"}},
		{"reserve_normal", reserve, client},
		{"reserve_priority", reserve, vip},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			dst := make([]Check, 0, bc.r.MaxChecks())
			for b.Loop() {
				_, dst = bc.r.Plan(bc.req, dst[:0])
			}
		})
	}
}

// BenchmarkPlanParallel is five checks from every core at once: Rules is
// read-only, so planning scales.
func BenchmarkPlanParallel(b *testing.B) {
	r := mustCompile(b, planYAML)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]Check, 0, r.MaxChecks())
		for pb.Next() {
			_, dst = r.Plan(client, dst[:0])
		}
	})
}
