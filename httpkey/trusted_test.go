package httpkey_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

func TestParseTrustedProxies(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "", want: nil},
		{in: " , ", want: nil},
		{in: "10.0.0.0/8, 192.168.1.1, ::1", want: []string{"10.0.0.0/8", "192.168.1.1/32", "::1/128"}},
		{in: "10.0.0.0/8 2001:db8::/32\n\t172.16.0.0/12", want: []string{"10.0.0.0/8", "2001:db8::/32", "172.16.0.0/12"}},
		{in: "::ffff:10.0.0.1", want: []string{"10.0.0.1/32"}},
		{in: "::ffff:10.0.0.0/104", want: []string{"10.0.0.0/8"}},
		{in: "10.0.0.0/8, 10.1.2.3/8", wantErr: `trusted proxy 2 of 2, "10.1.2.3/8": has bits set beyond /8; did you mean 10.0.0.0/8?`},
		{in: "proxy.internal", wantErr: `"proxy.internal"`},
		{in: "fe80::1%eth0", wantErr: `zone "eth0" not allowed`},
		{in: "10.0.0.0/33", wantErr: `"10.0.0.0/33"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := httpkey.ParseTrustedProxies(tt.in)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "httpkey: ")
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			var want []netip.Prefix
			for _, w := range tt.want {
				want = append(want, netip.MustParsePrefix(w))
			}
			assert.Equal(t, want, got)
		})
	}
}

// TestMappedTrustedPrefix checks that a prefix written as IPv4-mapped IPv6
// directly into TrustedProxies (not through ParseTrustedProxies) still
// trusts the IPv4 peers it maps.
func TestMappedTrustedPrefix(t *testing.T) {
	r := httpkey.IPResolver{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")},
		Header:         httpkey.XForwardedForOnly,
	}
	got, err := r.ClientIP(newRequest("10.1.2.3:80", xff("198.51.100.9")))
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.9", got.String())
}

// TestIPCopiesResolver checks that IP is not affected by later changes to the
// resolver it was built from.
func TestIPCopiesResolver(t *testing.T) {
	trusted := prefixes(t, "10.0.0.0/8")
	r := httpkey.IPResolver{TrustedProxies: trusted, Header: httpkey.XForwardedForOnly}
	e := httpkey.IP(r)
	trusted[0] = netip.MustParsePrefix("192.0.2.0/24")
	r.Header = httpkey.ForwardedOnly

	got, err := e(newRequest("10.0.0.1:80", xff("198.51.100.9")))
	require.NoError(t, err)
	assert.Equal(t, "ip:198.51.100.9", got)
}
