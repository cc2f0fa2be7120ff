package httpkey_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

func ExampleIPResolver_ClientIP() {
	trusted, err := httpkey.ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	resolver := httpkey.IPResolver{TrustedProxies: trusted}

	// The client 198.51.100.9 went through two of our proxies; whatever it
	// claimed itself (6.6.6.6) is further left and never read.
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = "10.0.0.1:54321"
	r.Header.Set("Forwarded", `for=6.6.6.6, for=198.51.100.9;proto=https, for="10.0.0.2:8080"`)
	ip, err := resolver.ClientIP(r)
	fmt.Println(ip, err)

	// The same header from a peer that is not a trusted proxy is ignored.
	r.RemoteAddr = "203.0.113.7:54321"
	ip, err = resolver.ClientIP(r)
	fmt.Println(ip, err)
	// Output:
	// 198.51.100.9 <nil>
	// 203.0.113.7 <nil>
}

func ExampleIPResolver_Key() {
	var resolver httpkey.IPResolver // no trusted proxies; IPv6 by /64
	for _, addr := range []string{"203.0.113.7:1", "[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:1"} {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r.RemoteAddr = addr
		key, _ := resolver.Key(r)
		fmt.Println(key)
	}
	// Output:
	// ip:203.0.113.7
	// ip:2001:db8:1:2::/64
	// ip:2001:db8:1:2::/64
}

func ExampleParseTrustedProxies() {
	trusted, err := httpkey.ParseTrustedProxies("10.0.0.0/8, 192.168.1.1, ::1")
	fmt.Println(trusted, err)
	_, err = httpkey.ParseTrustedProxies("10.1.2.3/8")
	fmt.Println(err)
	// Output:
	// [10.0.0.0/8 192.168.1.1/32 ::1/128] <nil>
	// httpkey: trusted proxy 1 of 1, "10.1.2.3/8": has bits set beyond /8; did you mean 10.0.0.0/8?
}

func ExampleAPIKey() {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.Header.Set("X-API-Key", "sk_live_1234")

	key, _ := httpkey.APIKey(httpkey.APIKeyConfig{})(r)
	fmt.Println(key)
	// The first 16 bytes of SHA-256("sk_live_1234"), as `sha256sum` prints them.
	hashed, _ := httpkey.APIKey(httpkey.APIKeyConfig{Hash: true})(r)
	fmt.Println(hashed)

	r.Header.Del("X-API-Key")
	_, err := httpkey.APIKey(httpkey.APIKeyConfig{})(r)
	fmt.Println(errors.Is(err, httpkey.ErrNoKey), err)
	// Output:
	// key:sk_live_1234
	// keyhash:c5984e3d53fc9e860f5cdd1e08b13d63
	// true httpkey: no key: no X-API-Key header
}

// ctxUser is where this example's authentication middleware puts the user.
type ctxUser struct{}

func ExampleUser() {
	fromContext := func(ctx context.Context) (string, bool) {
		id, ok := ctx.Value(ctxUser{}).(string)
		return id, ok
	}
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r = r.WithContext(context.WithValue(r.Context(), ctxUser{}, "42"))
	fmt.Println(httpkey.User(fromContext)(r))
	// Output: user:42 <nil>
}

func ExampleFirst() {
	fromContext := func(ctx context.Context) (string, bool) {
		id, ok := ctx.Value(ctxUser{}).(string)
		return id, ok
	}
	// The user if authenticated, else the API key, else the address.
	key := httpkey.First(
		httpkey.User(fromContext),
		httpkey.APIKey(httpkey.APIKeyConfig{}),
		httpkey.IP(httpkey.IPResolver{}),
	)

	r := httptest.NewRequest(http.MethodGet, "/x", nil) // from 192.0.2.1
	fmt.Println(key(r))
	r.Header.Set("X-API-Key", "sk_live_1234")
	fmt.Println(key(r))
	r = r.WithContext(context.WithValue(r.Context(), ctxUser{}, "42"))
	fmt.Println(key(r))
	// Output:
	// ip:192.0.2.1 <nil>
	// key:sk_live_1234 <nil>
	// user:42 <nil>
}

func ExampleAll() {
	fromContext := func(ctx context.Context) (string, bool) {
		id, ok := ctx.Value(ctxUser{}).(string)
		return id, ok
	}
	key := httpkey.All(httpkey.IP(httpkey.IPResolver{}), httpkey.User(fromContext), httpkey.Endpoint())

	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = "1.2.3.4:5678"
	r = r.WithContext(context.WithValue(r.Context(), ctxUser{}, "42"))
	fmt.Println(key(r))

	// A '|' in a part is escaped, so this user cannot pass for another's key.
	r = r.WithContext(context.WithValue(r.Context(), ctxUser{}, "42|endpoint:GET /y"))
	fmt.Println(key(r))
	// Output:
	// ip:1.2.3.4|user:42|endpoint:GET /x <nil>
	// ip:1.2.3.4|user:42\|endpoint:GET /y|endpoint:GET /x <nil>
}

func ExampleEndpoint() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println(httpkey.Endpoint()(r)) // after routing: the pattern
	})
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/users/7", nil))
	// Output: endpoint:GET /users/{id} <nil>
}
