package httpkey_test

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

// checkTrace holds Trace to ClientIP on req: the same address or error,
// and steps that end where the reading ended: at an address no trusted
// proxy holds (the client), at a malformed entry (the client is the last
// good one), or with every address trusted (the leftmost is the client).
func checkTrace(t *testing.T, r httpkey.IPResolver, req *http.Request, want netip.Addr, wantErr error) {
	t.Helper()
	got, steps, err := r.Trace(req)
	if wantErr != nil {
		if err == nil || err.Error() != wantErr.Error() {
			t.Fatalf("Trace error %v, ClientIP's %v", err, wantErr)
		}
		return
	}
	if err != nil || got != want {
		t.Fatalf("Trace = %v, %v; ClientIP = %v", got, err, want)
	}
	if len(steps) == 0 || steps[0].Source != "RemoteAddr" {
		t.Fatalf("Trace steps %+v: the peer comes first", steps)
	}
	for i, s := range steps[:len(steps)-1] {
		if !s.Addr.IsValid() || !s.Trusted.IsValid() {
			t.Fatalf("Trace step %d of %+v: the reading went on past an address no trusted proxy holds", i, steps)
		}
	}
	last := steps[len(steps)-1]
	switch {
	case !last.Addr.IsValid():
		if len(steps) < 2 || steps[len(steps)-2].Addr != got {
			t.Fatalf("Trace steps %+v: a malformed entry ends the reading at the last good address, %v", steps, got)
		}
	case last.Addr != got:
		if last.Trusted.IsValid() {
			t.Fatalf("Trace steps %+v: the client %v is not the last address read", steps, got)
		}
	}
}

// Trace says why a client is who it is: the peer, and each entry of the
// forwarding header read from the right, with the trusted proxy that
// vouched for it.
func TestTrace(t *testing.T) {
	trusted, err := httpkey.ParseTrustedProxies("10.0.0.0/8, 2001:db8::/32")
	require.NoError(t, err)
	r := httpkey.IPResolver{TrustedProxies: trusted, Header: httpkey.XForwardedForOnly}
	ten := netip.MustParsePrefix("10.0.0.0/8")
	cases := []struct {
		name   string
		remote string
		xff    []string
		client string
		steps  []httpkey.Step
	}{
		{"a peer no proxy holds", "198.51.100.7:5000", []string{"6.6.6.6"}, "198.51.100.7", []httpkey.Step{
			{Source: "RemoteAddr", Entry: "198.51.100.7:5000", Addr: netip.MustParseAddr("198.51.100.7")},
		}},
		{"behind two proxies", "10.0.0.1:80", []string{"6.6.6.6, 198.51.100.9, 10.0.0.3"}, "198.51.100.9", []httpkey.Step{
			{Source: "RemoteAddr", Entry: "10.0.0.1:80", Addr: netip.MustParseAddr("10.0.0.1"), Trusted: ten},
			{Source: "X-Forwarded-For", Entry: "10.0.0.3", Addr: netip.MustParseAddr("10.0.0.3"), Trusted: ten},
			{Source: "X-Forwarded-For", Entry: "198.51.100.9", Addr: netip.MustParseAddr("198.51.100.9")},
		}},
		{"a malformed entry", "10.0.0.1:80", []string{"198.51.100.9, unknown, 10.0.0.2"}, "10.0.0.2", []httpkey.Step{
			{Source: "RemoteAddr", Entry: "10.0.0.1:80", Addr: netip.MustParseAddr("10.0.0.1"), Trusted: ten},
			{Source: "X-Forwarded-For", Entry: "10.0.0.2", Addr: netip.MustParseAddr("10.0.0.2"), Trusted: ten},
			{Source: "X-Forwarded-For", Entry: "unknown"},
		}},
		{"a trusted proxy that forwards nobody", "10.0.0.1:80", nil, "10.0.0.1", []httpkey.Step{
			{Source: "RemoteAddr", Entry: "10.0.0.1:80", Addr: netip.MustParseAddr("10.0.0.1"), Trusted: ten},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := &http.Request{RemoteAddr: tc.remote, Header: http.Header{}}
			if tc.xff != nil {
				req.Header["X-Forwarded-For"] = tc.xff
			}
			got, steps, err := r.Trace(req)
			require.NoError(t, err)
			assert.Equal(t, netip.MustParseAddr(tc.client), got)
			assert.Equal(t, tc.steps, steps)
			want, err := r.ClientIP(req)
			checkTrace(t, r, req, want, err)
		})
	}
	_, _, err = r.Trace(&http.Request{RemoteAddr: "@"})
	assert.Error(t, err)
}
