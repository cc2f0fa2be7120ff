package middleware

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/rules"
)

// clients returns the client keys of the requests observed so far.
func (r *recorder) clients() []string {
	_, reqs := r.take()
	out := make([]string, len(reqs))
	for i, q := range reqs {
		out[i] = q.Client
	}
	return out
}

const twoPerClient = `rate_limits:
  default: {requests: 2, window: 1h}
  ban: ["2001:db8:bad::/48"]
`

// Behind a trusted proxy the client is the forwarded address; IPv6 clients
// are keyed by their /64, so a subscriber cannot buy budgets by changing
// address within it.
func TestTrustedProxyIPv6(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, IP: loopbackProxy, Rules: rules.Static(compile(t, twoPerClient))})

	for _, tc := range []struct {
		xff    string
		status int
	}{
		{"2001:db8:1:2::1", 200},
		{"2001:db8:1:2::ffff", 200}, // the same /64
		{"2001:db8:1:2:aaaa::1", 429},
		{"2001:db8:1:3::1", 200}, // the next /64
		{"203.0.113.9, 2001:db8:1:3::2", 200},
		{"[2001:db8:1:3::3]:443", 429}, // a port is allowed; and the same /64
	} {
		assert.Equal(t, tc.status, get(t, srv, "/", "X-Forwarded-For: "+tc.xff).Status, tc.xff)
	}
	assert.Equal(t, []string{
		"ip:2001:db8:1:2::/64", "ip:2001:db8:1:2::/64", "ip:2001:db8:1:2::/64",
		"ip:2001:db8:1:3::/64", "ip:2001:db8:1:3::/64", "ip:2001:db8:1:3::/64",
	}, obs.clients())

	banned := get(t, srv, "/", "X-Forwarded-For: 2001:db8:bad::7")
	assert.Equal(t, http.StatusForbidden, banned.Status, "the ban list sees the forwarded address")
}

// The per_ip limit counts an IPv6 client by its /64 too, even when each of
// its requests claims another identity: rotating addresses inside the /64
// buys no per_ip budget.
func TestPerIPCountsTheIPv6Group(t *testing.T) {
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, IP: loopbackProxy, Client: httpkey.APIKey(httpkey.APIKeyConfig{}),
		Rules: rules.Static(compile(t, "rate_limits:\n  per_ip: {requests: 2, window: 1h}\n"))})
	for i, tc := range []struct {
		xff, key string
		status   int
	}{
		{"2001:db8:1:2::1", "a", 200},
		{"2001:db8:1:2::ffff", "b", 200},
		{"2001:db8:1:2:aaaa::1", "c", 429}, // the same /64, a third identity
		{"2001:db8:1:3::1", "d", 200},      // the next /64
	} {
		got := get(t, srv, "/", "X-Forwarded-For: "+tc.xff, "X-API-Key: "+tc.key)
		assert.Equal(t, tc.status, got.Status, "request %d from %s", i, tc.xff)
	}
}

// Without a trusted proxy, a forwarding header is anybody's to write and is
// never read.
func TestUntrustedForwardingIgnored(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, IP: httpkey.IPResolver{Header: httpkey.XForwardedForOnly}, Rules: rules.Static(compile(t, twoPerClient))})
	var got []int
	for _, spoof := range []string{"198.51.100.1", "198.51.100.2", "2001:db8:bad::7"} {
		got = append(got, get(t, srv, "/", "X-Forwarded-For: "+spoof).Status)
	}
	assert.Equal(t, []int{200, 200, 429}, got, "one client whatever it claims, and not banned by a claim")
	assert.Equal(t, repeat("ip:127.0.0.1", 3), obs.clients())
}

// A real IPv6 connection.
func TestIPv6Client(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	mw, err := New(Config{Limiter: lim, Observer: obs, Logger: quiet, Rules: rules.Static(compile(t, twoPerClient)),
		IP: httpkey.IPResolver{IPv6Prefix: 128}})
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(mw(okHandler))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	assert.Equal(t, []int{200, 200, 429}, statuses(t, srv, "/", 3))
	assert.Equal(t, repeat("ip:::1", 3), obs.clients())
}

// httpkey.All keys by several sources at once: a client must change all of
// them to get a fresh budget.
func TestSeveralKeys(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	srv := serve(t, Config{Limiter: lim, Observer: obs, IP: loopbackProxy,
		Client: httpkey.All(httpkey.IP(loopbackProxy), httpkey.APIKey(httpkey.APIKeyConfig{})),
		Rules:  rules.Static(compile(t, twoPerClient))})
	for _, tc := range []struct {
		ip, key string
		status  int
	}{
		{"198.51.100.1", "abc", 200},
		{"198.51.100.1", "abc", 200},
		{"198.51.100.1", "abc", 429},
		{"198.51.100.1", "new", 200}, // a new key from the same address
		{"198.51.100.2", "abc", 200}, // the same key from a new address
	} {
		assert.Equal(t, tc.status, get(t, srv, "/", "X-Forwarded-For: "+tc.ip, "X-API-Key: "+tc.key).Status)
	}
	assert.Equal(t, []string{
		"ip:198.51.100.1|key:abc", "ip:198.51.100.1|key:abc", "ip:198.51.100.1|key:abc",
		"ip:198.51.100.1|key:new", "ip:198.51.100.2|key:abc",
	}, obs.clients())
}

// First falls back from the user to the API key to the address.
func TestFirstKey(t *testing.T) {
	obs := &recorder{}
	lim, _ := manualLimiter(t, epoch)
	srv := serveWith(t, Config{Limiter: lim, Observer: obs, User: userOf,
		Client: httpkey.First(httpkey.User(userOf), httpkey.APIKey(httpkey.APIKeyConfig{}), httpkey.IP(httpkey.IPResolver{})),
		Rules:  rules.Static(compile(t, twoPerClient))}, authenticate)
	get(t, srv, "/", "X-User: 42", "X-API-Key: abc")
	get(t, srv, "/", "X-API-Key: abc")
	get(t, srv, "/")
	assert.Equal(t, []string{"user:42", "key:abc", "ip:127.0.0.1"}, obs.clients())
}
