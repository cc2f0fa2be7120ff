package httpkey_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

// Numbers and the command that produced them: docs/benchmarks.md. Every
// benchmark reports allocations; ClientIP should make none.

func BenchmarkClientIP(b *testing.B) {
	trusted, err := httpkey.ParseTrustedProxies("10.0.0.0/8, 2001:db8:ffff::/48")
	if err != nil {
		b.Fatal(err)
	}
	tests := []struct {
		name    string
		policy  httpkey.HeaderPolicy
		remote  string
		headers []header
		want    string
	}{
		{"direct/IPv4", httpkey.ForwardedOnly, "203.0.113.7:54321", nil, "203.0.113.7"},
		{"direct/IPv6", httpkey.ForwardedOnly, "[2001:db8:1:2::7]:54321", nil, "2001:db8:1:2::7"},
		{"3-hop/X-Forwarded-For", httpkey.XForwardedForOnly, "10.0.0.1:54321",
			[]header{xff("198.51.100.9, 10.0.0.3, 10.0.0.2")}, "198.51.100.9"},
		{"3-hop/Forwarded", httpkey.ForwardedOnly, "10.0.0.1:54321",
			[]header{forwarded(`for=198.51.100.9;proto=https, for=10.0.0.3, for="[2001:db8:ffff::2]:8080"`)}, "198.51.100.9"},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			r := httpkey.IPResolver{TrustedProxies: trusted, Header: tt.policy}
			req := newRequest(tt.remote, tt.headers...)
			if got, err := r.ClientIP(req); err != nil || got.String() != tt.want {
				b.Fatalf("ClientIP = %v, %v; want %s", got, err, tt.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = r.ClientIP(req)
			}
		})
	}
}

func BenchmarkKey(b *testing.B) {
	user := httpkey.User(func(ctx context.Context) (string, bool) { return "42", true })
	tests := []struct {
		name string
		e    httpkey.Extractor
		req  *http.Request
	}{
		{"IP/IPv4", httpkey.IP(httpkey.IPResolver{}), newRequest("203.0.113.7:54321")},
		{"IP/IPv6-64", httpkey.IP(httpkey.IPResolver{}), newRequest("[2001:db8:1:2::7]:54321")},
		{"APIKey", httpkey.APIKey(httpkey.APIKeyConfig{}), newRequest("203.0.113.7:1", header{"X-API-Key", "sk_live_0123456789abcdef0123456789abcdef"})},
		{"APIKey/hashed", httpkey.APIKey(httpkey.APIKeyConfig{Hash: true}), newRequest("203.0.113.7:1", header{"X-API-Key", "sk_live_0123456789abcdef0123456789abcdef"})},
		{"First/user", httpkey.First(user, httpkey.IP(httpkey.IPResolver{})), newRequest("203.0.113.7:54321")},
		{"All/IP+user+endpoint", httpkey.All(httpkey.IP(httpkey.IPResolver{}), user, httpkey.Endpoint()), newRequest("203.0.113.7:54321")},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			if _, err := tt.e(tt.req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = tt.e(tt.req)
			}
		})
	}
}
