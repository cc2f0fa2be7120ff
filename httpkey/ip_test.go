package httpkey_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

// testTrusted are the proxies the chain tests trust: a private /8, one IPv6
// /48 and one bare address.
const testTrusted = "10.0.0.0/8, 2001:db8:ffff::/48, 192.168.0.1"

func TestClientIPDirectPeer(t *testing.T) {
	tests := []struct {
		name, remote, want string
	}{
		{"IPv4 with port", "203.0.113.7:1234", "203.0.113.7"},
		{"IPv4 without port", "203.0.113.7", "203.0.113.7"},
		{"IPv6 with port", "[2001:db8::1]:443", "2001:db8::1"},
		{"IPv6 without port", "2001:db8::1", "2001:db8::1"},
		{"IPv6 in brackets without port", "[2001:db8::1]", "2001:db8::1"},
		{"IPv6 with zone loses it", "[fe80::1%eth0]:80", "fe80::1"},
		{"IPv4-mapped IPv6 is unmapped", "[::ffff:203.0.113.7]:80", "203.0.113.7"},
		{"IPv4-mapped IPv6 without port", "::ffff:203.0.113.7", "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r httpkey.IPResolver
			got, err := r.ClientIP(newRequest(tt.remote))
			require.NoError(t, err)
			assert.Equal(t, netip.MustParseAddr(tt.want), got)
		})
	}
}

func TestClientIPBadRemoteAddr(t *testing.T) {
	for _, remote := range []string{
		"@", // a Unix socket
		"",
		"example.com:80",
		"203.0.113.7:99999",
		"203.0.113.7:",
		"[203.0.113.7]:80",
		"[2001:db8::1",
		"2001:db8::1:80]",
		"203.0.113.7:80:80",
	} {
		t.Run(remote, func(t *testing.T) {
			r := httpkey.IPResolver{TrustedProxies: prefixes(t, "0.0.0.0/0, ::/0")}
			_, err := r.ClientIP(newRequest(remote, xff("198.51.100.9")))
			require.Error(t, err)
			assert.NotErrorIs(t, err, httpkey.ErrNoKey)
			assert.Contains(t, err.Error(), "httpkey: ")
			assert.Contains(t, err.Error(), `"`+remote+`"`)
		})
	}
}

func TestClientIPUntrustedPeerIgnoresHeaders(t *testing.T) {
	spoofed := []header{xff("198.51.100.9"), forwarded("for=198.51.100.9")}
	for _, policy := range []httpkey.HeaderPolicy{
		httpkey.ForwardedOnly, httpkey.XForwardedForOnly, httpkey.PreferForwarded, httpkey.PreferXForwardedFor,
	} {
		t.Run(policy.String(), func(t *testing.T) {
			r := httpkey.IPResolver{TrustedProxies: prefixes(t, testTrusted), Header: policy}
			got, err := r.ClientIP(newRequest("203.0.113.7:1234", spoofed...))
			require.NoError(t, err)
			assert.Equal(t, "203.0.113.7", got.String())

			var none httpkey.IPResolver // trusts no one
			got, err = none.ClientIP(newRequest("10.0.0.1:1234", spoofed...))
			require.NoError(t, err)
			assert.Equal(t, "10.0.0.1", got.String())
		})
	}
}

func TestClientIPTrustedChain(t *testing.T) {
	const (
		fwdOnly = httpkey.ForwardedOnly
		xffOnly = httpkey.XForwardedForOnly
	)
	tests := []struct {
		name    string
		policy  httpkey.HeaderPolicy
		remote  string
		headers []header
		want    string
	}{
		// X-Forwarded-For.
		{"xff one hop", xffOnly, "10.0.0.1:80", []header{xff("198.51.100.9")}, "198.51.100.9"},
		{"xff three proxies", xffOnly, "10.0.0.1:80", []header{xff("198.51.100.9, 10.0.0.2, 192.168.0.1")}, "198.51.100.9"},
		{"xff client-written entries on the left are ignored", xffOnly, "10.0.0.1:80", []header{xff("6.6.6.6, 10.9.9.9, 198.51.100.9, 10.0.0.2")}, "198.51.100.9"},
		{"xff all trusted gives the leftmost", xffOnly, "10.0.0.1:80", []header{xff("10.0.0.5, 192.168.0.1, 10.0.0.2")}, "10.0.0.5"},
		{"xff headers concatenate in order", xffOnly, "10.0.0.1:80", []header{xff("6.6.6.6, 198.51.100.9"), xff("10.0.0.2"), xff("10.0.0.3")}, "198.51.100.9"},
		{"xff later header is nearer", xffOnly, "10.0.0.1:80", []header{xff("198.51.100.9"), xff("203.0.113.5")}, "203.0.113.5"},
		{"xff ports on v4 and v6", xffOnly, "10.0.0.1:80", []header{xff("198.51.100.9:5555, [2001:db8:ffff::2]:80")}, "198.51.100.9"},
		{"xff bracketed v6 client", xffOnly, "[2001:db8:ffff::1]:80", []header{xff("[2001:db8:cafe::17]:4711")}, "2001:db8:cafe::17"},
		{"xff bare v6 client", xffOnly, "[2001:db8:ffff::1]:80", []header{xff("2001:db8:cafe::17, 2001:db8:ffff::9")}, "2001:db8:cafe::17"},
		{"xff mapped client is unmapped", xffOnly, "10.0.0.1:80", []header{xff("::ffff:198.51.100.9")}, "198.51.100.9"},
		{"xff mapped proxy is trusted", xffOnly, "[::ffff:10.0.0.1]:80", []header{xff("198.51.100.9, ::ffff:10.0.0.2")}, "198.51.100.9"},
		{"xff empty entries are skipped", xffOnly, "10.0.0.1:80", []header{xff(" , 198.51.100.9,, 10.0.0.2 ,")}, "198.51.100.9"},
		{"xff empty header gives the peer", xffOnly, "10.0.0.1:80", []header{xff("")}, "10.0.0.1"},
		{"xff absent gives the peer", xffOnly, "10.0.0.1:80", nil, "10.0.0.1"},
		{"xff malformed mid-chain stops at the last good", xffOnly, "10.0.0.1:80", []header{xff("198.51.100.9, not-an-ip, 10.0.0.2")}, "10.0.0.2"},
		{"xff malformed nearest gives the peer", xffOnly, "10.0.0.1:80", []header{xff("198.51.100.9, 10.0.0.2:99999")}, "10.0.0.1"},
		{"xff malformed beyond the client does not matter", xffOnly, "10.0.0.1:80", []header{xff("garbage, 198.51.100.9, 10.0.0.2")}, "198.51.100.9"},
		{"xff unknown stops", xffOnly, "10.0.0.1:80", []header{xff("198.51.100.9, unknown")}, "10.0.0.1"},
		{"xff zone is malformed", xffOnly, "10.0.0.1:80", []header{xff("198.51.100.9, fe80::1%eth0")}, "10.0.0.1"},
		{"xff quoted is malformed", xffOnly, "10.0.0.1:80", []header{xff(`"198.51.100.9"`)}, "10.0.0.1"},
		{"xff two addresses without comma is malformed", xffOnly, "10.0.0.1:80", []header{xff("198.51.100.9 203.0.113.5")}, "10.0.0.1"},
		{"xff leading zeros are malformed", xffOnly, "10.0.0.1:80", []header{xff("010.0.0.2")}, "10.0.0.1"},

		// Forwarded.
		{"fwd RFC 7239 example", fwdOnly, "10.0.0.1:80", []header{forwarded(`for=192.0.2.43, for="[2001:db8:cafe::17]:4711"`)}, "2001:db8:cafe::17"},
		{"fwd three proxies with other parameters", fwdOnly, "10.0.0.1:80", []header{forwarded(`for=198.51.100.9;proto=https;by=10.0.0.2, for=10.0.0.2;host="example.com", For="[2001:db8:ffff::5]:8080"`)}, "198.51.100.9"},
		{"fwd quoted v4 with port", fwdOnly, "10.0.0.1:80", []header{forwarded(`for="198.51.100.9:4711"`)}, "198.51.100.9"},
		{"fwd parameter names ignore case", fwdOnly, "10.0.0.1:80", []header{forwarded(`FOR=198.51.100.9`)}, "198.51.100.9"},
		{"fwd quoted strings may hold commas and quotes", fwdOnly, "10.0.0.1:80", []header{forwarded(`for=198.51.100.9;ext="a, \"for=6.6.6.6\", b", for=10.0.0.2`)}, "198.51.100.9"},
		{"fwd headers concatenate in order", fwdOnly, "10.0.0.1:80", []header{forwarded("for=6.6.6.6, for=198.51.100.9"), forwarded("for=10.0.0.2")}, "198.51.100.9"},
		{"fwd all trusted gives the leftmost", fwdOnly, "10.0.0.1:80", []header{forwarded(`for=10.0.0.5, for="[2001:db8:ffff::2]"`)}, "10.0.0.5"},
		{"fwd mapped v6 is unmapped", fwdOnly, "10.0.0.1:80", []header{forwarded(`for="[::ffff:198.51.100.9]:80"`)}, "198.51.100.9"},
		{"fwd obfuscated port is fine", fwdOnly, "10.0.0.1:80", []header{forwarded(`for="[2001:db8:cafe::17]:_p1"`)}, "2001:db8:cafe::17"},
		{"fwd unknown stops", fwdOnly, "10.0.0.1:80", []header{forwarded("for=198.51.100.9, for=unknown, for=10.0.0.2")}, "10.0.0.2"},
		{"fwd obfuscated stops", fwdOnly, "10.0.0.1:80", []header{forwarded("for=198.51.100.9, for=_hidden")}, "10.0.0.1"},
		{"fwd element without for stops", fwdOnly, "10.0.0.1:80", []header{forwarded("for=198.51.100.9, by=10.0.0.2;proto=http")}, "10.0.0.1"},
		{"fwd two for in one element stops", fwdOnly, "10.0.0.1:80", []header{forwarded("for=198.51.100.9;for=10.0.0.2")}, "10.0.0.1"},
		{"fwd space around = is malformed", fwdOnly, "10.0.0.1:80", []header{forwarded("for = 198.51.100.9")}, "10.0.0.1"},
		{"fwd escaped for value is malformed", fwdOnly, "10.0.0.1:80", []header{forwarded(`for="198.51.100\.9"`)}, "10.0.0.1"},
		{"fwd empty for value is malformed", fwdOnly, "10.0.0.1:80", []header{forwarded(`for=""`)}, "10.0.0.1"},
		{"fwd unclosed quote on the left does not swallow the chain", fwdOnly, "10.0.0.1:80", []header{forwarded(`for="6.6.6.6, for=198.51.100.9`)}, "198.51.100.9"},
		{"fwd unclosed quote on the left stops a trusted walk", fwdOnly, "10.0.0.1:80", []header{forwarded(`for="6.6.6.6, for=10.0.0.2`)}, "10.0.0.2"},
		{"fwd escaped closing quote is malformed", fwdOnly, "10.0.0.1:80", []header{forwarded(`for="198.51.100.9\"`)}, "10.0.0.1"},
		{"fwd unbracketed v6 reads as an address, without port", fwdOnly, "10.0.0.1:80", []header{forwarded(`for="2001:db8:cafe::17"`)}, "2001:db8:cafe::17"},
		{"fwd bracketed v4 is malformed", fwdOnly, "10.0.0.1:80", []header{forwarded(`for="[198.51.100.9]"`)}, "10.0.0.1"},
		{"fwd empty elements and pairs are skipped", fwdOnly, "10.0.0.1:80", []header{forwarded(`, for=198.51.100.9;;proto=http; , ,`)}, "198.51.100.9"},
		{"fwd empty header gives the peer", fwdOnly, "10.0.0.1:80", []header{forwarded("")}, "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httpkey.IPResolver{TrustedProxies: prefixes(t, testTrusted), Header: tt.policy}
			got, err := r.ClientIP(newRequest(tt.remote, tt.headers...))
			require.NoError(t, err)
			assert.Equal(t, netip.MustParseAddr(tt.want), got)
		})
	}
}

func TestClientIPHeaderPolicy(t *testing.T) {
	const (
		viaXFF = "198.51.100.1"
		viaFwd = "198.51.100.2"
		peer   = "10.0.0.1"
	)
	both := []header{xff(viaXFF), forwarded("for=" + viaFwd)}
	tests := []struct {
		policy                       httpkey.HeaderPolicy
		withBoth, onlyXFF, onlyFwded string
	}{
		{httpkey.ForwardedOnly, viaFwd, peer, viaFwd},
		{httpkey.XForwardedForOnly, viaXFF, viaXFF, peer},
		{httpkey.PreferForwarded, viaFwd, viaXFF, viaFwd},
		{httpkey.PreferXForwardedFor, viaXFF, viaXFF, viaFwd},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			r := httpkey.IPResolver{TrustedProxies: prefixes(t, testTrusted), Header: tt.policy}
			for _, c := range []struct {
				headers []header
				want    string
			}{
				{both, tt.withBoth},
				{both[:1], tt.onlyXFF},
				{both[1:], tt.onlyFwded},
			} {
				got, err := r.ClientIP(newRequest(peer+":80", c.headers...))
				require.NoError(t, err)
				assert.Equal(t, c.want, got.String(), "headers %v", c.headers)
			}
		})
	}
}

func TestZeroHeaderPolicyIsForwardedOnly(t *testing.T) {
	var zero httpkey.HeaderPolicy
	assert.Equal(t, httpkey.ForwardedOnly, zero)
}

func TestKey(t *testing.T) {
	tests := []struct {
		name       string
		v6, v4     int
		remote     string
		want       string
		wantErrSub string
	}{
		{name: "IPv4 alone", remote: "203.0.113.7:1", want: "ip:203.0.113.7"},
		{name: "IPv6 by /64 by default", remote: "[2001:db8:1:2:3:4:5:6]:1", want: "ip:2001:db8:1:2::/64"},
		{name: "IPv6 by /48", v6: 48, remote: "[2001:db8:1:2:3:4:5:6]:1", want: "ip:2001:db8:1::/48"},
		{name: "IPv6 alone", v6: 128, remote: "[2001:db8:1:2:3:4:5:6]:1", want: "ip:2001:db8:1:2:3:4:5:6"},
		{name: "IPv4 by /24", v4: 24, remote: "203.0.113.7:1", want: "ip:203.0.113.0/24"},
		{name: "IPv4 grouping leaves IPv6 at /64", v4: 24, remote: "[2001:db8:1:2::9]:1", want: "ip:2001:db8:1:2::/64"},
		{name: "IPv4-mapped is keyed as IPv4", v6: 48, remote: "[::ffff:203.0.113.7]:1", want: "ip:203.0.113.7"},
		{name: "IPv6Prefix negative", v6: -1, remote: "203.0.113.7:1", wantErrSub: "IPv6Prefix -1"},
		{name: "IPv6Prefix too long", v6: 129, remote: "203.0.113.7:1", wantErrSub: "IPv6Prefix 129"},
		{name: "IPv4Prefix too long", v4: 33, remote: "203.0.113.7:1", wantErrSub: "IPv4Prefix 33"},
		{name: "bad RemoteAddr", remote: "@", wantErrSub: `RemoteAddr "@"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httpkey.IPResolver{IPv6Prefix: tt.v6, IPv4Prefix: tt.v4}
			got, err := r.Key(newRequest(tt.remote))
			if tt.wantErrSub != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "httpkey: ")
				assert.Contains(t, err.Error(), tt.wantErrSub)
				if tt.remote != "@" {
					assert.Error(t, r.Validate(), "a configuration error")
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			require.NoError(t, r.Validate())
			// ClientIP stays unmasked.
			ip, err := r.ClientIP(newRequest(tt.remote))
			require.NoError(t, err)
			assert.NotContains(t, ip.String(), "/")
		})
	}
}

func TestInvalidHeaderPolicy(t *testing.T) {
	r := httpkey.IPResolver{Header: httpkey.HeaderPolicy(9)}
	const want = "httpkey: IPResolver.Header HeaderPolicy(9) is not a HeaderPolicy constant"
	_, err := r.ClientIP(newRequest("203.0.113.7:1"))
	assert.EqualError(t, err, want)
	_, err = r.Key(newRequest("203.0.113.7:1"))
	assert.EqualError(t, err, want)
	assert.EqualError(t, r.Validate(), want)
}

func TestKeyOf(t *testing.T) {
	r := httpkey.IPResolver{}
	cases := map[string]string{
		"2001:db8:1:2::ffff": "ip:2001:db8:1:2::/64",
		"203.0.113.7":        "ip:203.0.113.7",
		"::ffff:203.0.113.7": "ip:203.0.113.7",
		"fe80::1%eth0":       "ip:fe80::/64",
	}
	for in, want := range cases {
		got, err := r.KeyOf(netip.MustParseAddr(in))
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := r.KeyOf(netip.Addr{})
	assert.Error(t, err)
	_, err = (&httpkey.IPResolver{IPv6Prefix: 200}).KeyOf(netip.MustParseAddr("::1"))
	assert.Error(t, err)
}
