package httpkey_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

// constant returns an Extractor that always gives key.
func constant(key string) httpkey.Extractor {
	return func(*http.Request) (string, error) { return key, nil }
}

// failing returns an Extractor that always fails with err.
func failing(err error) httpkey.Extractor {
	return func(*http.Request) (string, error) { return "", err }
}

// policyRequest returns a request from 203.0.113.7 for GET /x, with the user
// id in its context when user is not empty, and the headers.
func policyRequest(user string, headers ...header) *http.Request {
	r := newRequest("203.0.113.7:1234", headers...)
	if user != "" {
		r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
	}
	return r
}

func TestFirst(t *testing.T) {
	first := httpkey.First(
		httpkey.User(userFromContext),
		httpkey.APIKey(httpkey.APIKeyConfig{}),
		httpkey.IP(httpkey.IPResolver{}),
	)
	tests := []struct {
		name    string
		req     *http.Request
		want    string
		wantErr error
	}{
		{"user wins", policyRequest("42", header{"X-API-Key", "k1"}), "user:42", nil},
		{"then the API key", policyRequest("", header{"X-API-Key", "k1"}), "key:k1", nil},
		{"then the address", policyRequest(""), "ip:203.0.113.7", nil},
		{"a malformed API key is refused, not limited by address", policyRequest("", header{"X-API-Key", "a\x00"}), "", httpkey.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := first(tt.req)
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestFirstStopsAtOtherErrors(t *testing.T) {
	boom := errors.New("boom")
	called := false
	never := func(*http.Request) (string, error) { called = true; return "never", nil }

	_, err := httpkey.First(failing(httpkey.ErrNoKey), failing(boom), never)(policyRequest(""))
	assert.ErrorIs(t, err, boom)
	assert.False(t, called)

	got, err := httpkey.First(constant("a"), never)(policyRequest(""))
	require.NoError(t, err)
	assert.Equal(t, "a", got)
	assert.False(t, called, "First stops at the first key")
}

func TestFirstNoKey(t *testing.T) {
	_, err := httpkey.First(httpkey.User(userFromContext), httpkey.APIKey(httpkey.APIKeyConfig{}))(policyRequest(""))
	require.ErrorIs(t, err, httpkey.ErrNoKey)
	assert.EqualError(t, err, "httpkey: no key: none of 2 extractors found a key")
}

func TestAll(t *testing.T) {
	all := httpkey.All(httpkey.IP(httpkey.IPResolver{}), httpkey.User(userFromContext), httpkey.Endpoint())

	got, err := all(policyRequest("42"))
	require.NoError(t, err)
	assert.Equal(t, "ip:203.0.113.7|user:42|endpoint:GET /x", got)

	got, err = all(policyRequest(`a|b\c`))
	require.NoError(t, err)
	assert.Equal(t, `ip:203.0.113.7|user:a\|b\\c|endpoint:GET /x`, got)

	_, err = all(policyRequest(""))
	assert.ErrorIs(t, err, httpkey.ErrNoKey, "a missing part makes the whole key missing")

	one, err := httpkey.All(constant("ip:203.0.113.7"))(policyRequest(""))
	require.NoError(t, err)
	assert.Equal(t, "ip:203.0.113.7", one)
}

// TestFirstOfAll checks the policy "address and user when authenticated, else
// address and API key, else address alone".
func TestFirstOfAll(t *testing.T) {
	ip := httpkey.IP(httpkey.IPResolver{})
	policy := httpkey.First(
		httpkey.All(ip, httpkey.User(userFromContext)),
		httpkey.All(ip, httpkey.APIKey(httpkey.APIKeyConfig{Hash: true})),
		ip,
	)
	got, err := policy(policyRequest("42", header{"X-API-Key", "k"}))
	require.NoError(t, err)
	assert.Equal(t, "ip:203.0.113.7|user:42", got)

	got, err = policy(policyRequest("", header{"X-API-Key", "k"}))
	require.NoError(t, err)
	assert.Regexp(t, `^ip:203\.0\.113\.7\|keyhash:[0-9a-f]{32}$`, got)

	got, err = policy(policyRequest(""))
	require.NoError(t, err)
	assert.Equal(t, "ip:203.0.113.7", got)
}

func TestCombinatorsCopyTheirArguments(t *testing.T) {
	es := []httpkey.Extractor{constant("a"), constant("b")}
	first, all := httpkey.First(es...), httpkey.All(es...)
	es[0], es[1] = constant("x"), constant("y")

	got, err := first(policyRequest(""))
	require.NoError(t, err)
	assert.Equal(t, "a", got)
	got, err = all(policyRequest(""))
	require.NoError(t, err)
	assert.Equal(t, "a|b", got)
}

func TestCombinatorsPanicOnMisuse(t *testing.T) {
	tests := []struct {
		name string
		call func()
		want string
	}{
		{"First of nothing", func() { httpkey.First() }, "httpkey: First needs at least one extractor"},
		{"All of nothing", func() { httpkey.All() }, "httpkey: All needs at least one extractor"},
		{"First with nil", func() { httpkey.First(constant("a"), nil) }, "httpkey: First: extractor 1 of 2 is nil"},
		{"All with nil", func() { httpkey.All(nil) }, "httpkey: All: extractor 0 of 1 is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tt.want, tt.call)
		})
	}
}

// TestConcurrentUse runs one policy from many goroutines; with -race it
// checks that extractors share no mutable state.
func TestConcurrentUse(t *testing.T) {
	trusted := prefixes(t, testTrusted)
	policy := httpkey.First(
		httpkey.All(httpkey.IP(httpkey.IPResolver{TrustedProxies: trusted, Header: httpkey.PreferForwarded}), httpkey.User(userFromContext), httpkey.Endpoint()),
		httpkey.All(httpkey.IP(httpkey.IPResolver{TrustedProxies: trusted}), httpkey.APIKey(httpkey.APIKeyConfig{Hash: true})),
		httpkey.IP(httpkey.IPResolver{TrustedProxies: trusted, Header: httpkey.XForwardedForOnly}),
	)
	reqs := []*http.Request{
		policyRequest("42"),
		policyRequest("", header{"X-API-Key", "k"}),
		policyRequest(""),
		newRequest("10.0.0.1:1", xff("198.51.100.9, 10.0.0.2"), forwarded("for=198.51.100.8")),
	}
	want := make([]string, len(reqs))
	for i, r := range reqs {
		var err error
		want[i], err = policy(r)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				j := (g + i) % len(reqs)
				got, err := policy(reqs[j])
				assert.NoError(t, err)
				assert.Equal(t, want[j], got)
			}
		})
	}
	wg.Wait()
}
