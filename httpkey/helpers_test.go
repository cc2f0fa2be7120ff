package httpkey_test

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

// header is one header line of a test request.
type header struct{ name, value string }

// newRequest returns a GET request for /x from remoteAddr with the given
// header lines, in order.
func newRequest(remoteAddr string, headers ...header) *http.Request {
	r, err := http.NewRequest(http.MethodGet, "http://example.com/x", nil)
	if err != nil {
		panic(err)
	}
	r.RemoteAddr = remoteAddr
	for _, h := range headers {
		r.Header.Add(h.name, h.value)
	}
	return r
}

func xff(v string) header       { return header{"X-Forwarded-For", v} }
func forwarded(v string) header { return header{"Forwarded", v} }

// prefixes parses a list of trusted proxies or fails the test.
func prefixes(t testing.TB, list string) []netip.Prefix {
	t.Helper()
	p, err := httpkey.ParseTrustedProxies(list)
	require.NoError(t, err)
	return p
}
