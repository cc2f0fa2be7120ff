package upstream_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/hybridlimit/hybridlimit/upstream"
)

// A Proxy in front of an upstream that has stopped serving: after two
// failures in a row its breaker opens, and it answers 503 at once, with
// Retry-After, without forwarding.
func ExampleNew() {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway) // the upstream's own proxy: nothing behind it
	}))
	defer failing.Close()
	target, _ := url.Parse(failing.URL)

	proxy, err := upstream.New(upstream.Config{
		Target:   target,
		Failures: 2,
		OpenFor:  30 * time.Second,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer proxy.Close()
	front := httptest.NewServer(proxy) // in a gateway: behind the rate limiter
	defer front.Close()

	for range 3 {
		resp, err := http.Get(front.URL + "/api/items")
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		line := resp.Status
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			line += ", Retry-After: " + ra + ", " + string(body)
		}
		fmt.Println(line)
	}
	s := proxy.Stats()
	fmt.Printf("breaker %v: %d forwarded, %d failed, %d answered without forwarding\n", s.State, s.Forwarded, s.Failures, s.Rejected)
	// Output:
	// 502 Bad Gateway
	// 502 Bad Gateway
	// 503 Service Unavailable, Retry-After: 30, {"error":"upstream_unavailable","message":"The upstream service is failing. Please retry after 30 seconds.","retry_after":30}
	// breaker open: 2 forwarded, 2 failed, 1 answered without forwarding
}
