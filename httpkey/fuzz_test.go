package httpkey_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

// The fuzz tests run their seeds in every `go test`; to search further, run
//
//	go test -run '^$' -fuzz '^FuzzForwarded$' -fuzztime 30s ./httpkey/
//
// Each fuzzes the header value (several header lines separated by '\n') and
// RemoteAddr, and checks that ClientIP never panics and either fails or
// returns an unmapped, zone-free address written somewhere in its input.

const fuzzTrusted = "10.0.0.0/8, 2001:db8::/32, 127.0.0.1"

func FuzzForwarded(f *testing.F) {
	for _, seed := range []struct{ value, remote string }{
		{"for=192.0.2.43", "10.0.0.1:80"},
		{`for=192.0.2.43, for="[2001:db8:cafe::17]:4711"`, "10.0.0.1:80"},
		{`for=198.51.100.9;proto=https;by=10.0.0.2, for=10.0.0.2;host="example.com", For="[2001:db8::5]:8080"`, "[2001:db8::1]:443"},
		{"for=10.0.0.5, for=10.0.0.2\nfor=127.0.0.1", "127.0.0.1:1"},
		{"for=198.51.100.9, for=unknown, for=10.0.0.2", "10.0.0.1:80"},
		{"for=_hidden", "10.0.0.1:80"},
		{`for="6.6.6.6, for=198.51.100.9`, "10.0.0.1:80"},
		{`for=a;x="q,\"u;o=te\\", for="[::ffff:10.0.0.3]:_p"`, "10.0.0.1:80"},
		{`for="[fe80::1%eth0]"`, "[fe80::1%eth0]:80"},
		{"", "@"},
		{", ;, for=1.2.3.4;;", "10.0.0.1"},
		{"::%0", "::1% 0"}, // a zone with a space in RemoteAddr, found by fuzzing
	} {
		f.Add(seed.value, seed.remote)
	}
	trusted, err := httpkey.ParseTrustedProxies(fuzzTrusted)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, value, remote string) {
		checkFuzzed(t, httpkey.IPResolver{TrustedProxies: trusted, Header: httpkey.ForwardedOnly}, "Forwarded", value, remote)
	})
}

func FuzzXForwardedFor(f *testing.F) {
	for _, seed := range []struct{ value, remote string }{
		{"198.51.100.9", "10.0.0.1:80"},
		{"198.51.100.9, 10.0.0.3, 10.0.0.2", "10.0.0.1:80"},
		{"6.6.6.6, 198.51.100.9\n10.0.0.2\n[2001:db8::9]:80", "[2001:db8::1]:443"},
		{"198.51.100.9:5555, [2001:db8:ffff::2]:80, 2001:db8::3", "10.0.0.1:80"},
		{"::ffff:198.51.100.9, ::ffff:10.0.0.2", "[::ffff:10.0.0.1]:80"},
		{"198.51.100.9, garbage, 10.0.0.2", "10.0.0.1:80"},
		{" , ,10.0.0.2,, ", "127.0.0.1"},
		{"fe80::1%eth0", "[fe80::1%eth0]:1"},
		{"", "@"},
		{"0\x80::%0", "::0% "}, // found by fuzzing
	} {
		f.Add(seed.value, seed.remote)
	}
	trusted, err := httpkey.ParseTrustedProxies(fuzzTrusted)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, value, remote string) {
		checkFuzzed(t, httpkey.IPResolver{TrustedProxies: trusted, Header: httpkey.XForwardedForOnly}, "X-Forwarded-For", value, remote)
	})
}

// checkFuzzed runs r on a request from remote with header name holding the
// lines of value, and checks the result.
func checkFuzzed(t *testing.T, r httpkey.IPResolver, name, value, remote string) {
	req := &http.Request{RemoteAddr: remote, Header: http.Header{name: strings.Split(value, "\n")}}
	got, err := r.ClientIP(req)
	checkTrace(t, r, req, got, err)
	if err != nil {
		if !strings.HasPrefix(err.Error(), "httpkey: ") {
			t.Fatalf("error %q lacks the package prefix", err)
		}
		if _, err := r.Key(req); err == nil {
			t.Fatalf("ClientIP failed but Key did not")
		}
		return
	}
	if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
		t.Fatalf("ClientIP = %v: want a valid, zone-free, unmapped address", got)
	}
	if !writtenIn(got, value) && !writtenIn(got, remote) {
		t.Fatalf("ClientIP = %v, which is neither in the header %q nor in RemoteAddr %q", got, value, remote)
	}
	key, err := r.Key(req)
	if err != nil || !strings.HasPrefix(key, "ip:") {
		t.Fatalf("Key = %q, %v after ClientIP = %v", key, err, got)
	}
}

// writtenIn reports whether s holds a, in any form netip parses: s whole,
// and s cut at every separator the headers use; each is tried as an address,
// as an address with a port, and without brackets. (s whole catches zones
// holding separators, which RemoteAddr may have.)
func writtenIn(a netip.Addr, s string) bool {
	pieces := strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(",;=\"[] \t\n", r) })
	for _, piece := range append(pieces, s) {
		candidates := []string{piece}
		if i := strings.LastIndexByte(piece, ':'); i >= 0 {
			candidates = append(candidates, piece[:i])
		}
		for _, c := range candidates {
			for _, c := range []string{c, strings.TrimSuffix(strings.TrimPrefix(c, "["), "]")} {
				if b, err := netip.ParseAddr(c); err == nil && b.WithZone("").Unmap() == a {
					return true
				}
			}
		}
	}
	return false
}
