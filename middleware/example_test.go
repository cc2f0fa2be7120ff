package middleware_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/middleware"
	"github.com/hybridlimit/hybridlimit/observe"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Rules from YAML, keyed by client address, in front of a handler. The
// limiter's clock is stopped so that the output is fixed; leave Clock nil in
// production.
func ExampleNew() {
	lim, err := hybrid.New(hybrid.Config{Clock: clock.NewManual(time.Unix(1_800_000_000, 0))})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	cfg, err := rules.Parse([]byte(`rate_limits:
  endpoints:
    /search: {requests: 2, window: 60}
`))
	if err != nil {
		log.Fatal(err)
	}
	rs, err := rules.Compile(cfg)
	if err != nil {
		log.Fatal(err)
	}
	limit, err := middleware.New(middleware.Config{
		Limiter: lim,
		Rules:   rules.Static(rs),
		// Behind a proxy: IP: httpkey.IPResolver{TrustedProxies: ..., Header: httpkey.XForwardedForOnly}
	})
	if err != nil {
		log.Fatal(err)
	}
	search := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "results\n") })
	srv := httptest.NewServer(limit(search))
	defer srv.Close()

	for range 3 {
		resp, err := srv.Client().Get(srv.URL + "/search")
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status)
		for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := resp.Header.Get(h); v != "" {
				fmt.Printf("  %s: %s\n", h, v)
			}
		}
		fmt.Printf("  %s", body)
	}
	srv.Client().CloseIdleConnections()
	// Output:
	// 200 OK
	//   X-RateLimit-Limit: 2
	//   X-RateLimit-Remaining: 1
	//   X-RateLimit-Reset: 1800000030
	//   RateLimit-Policy: "endpoint:/search";q=2;w=60
	//   RateLimit: "endpoint:/search";r=1;t=30
	//   results
	// 200 OK
	//   X-RateLimit-Limit: 2
	//   X-RateLimit-Remaining: 0
	//   X-RateLimit-Reset: 1800000060
	//   RateLimit-Policy: "endpoint:/search";q=2;w=60
	//   RateLimit: "endpoint:/search";r=0;t=60
	//   results
	// 429 Too Many Requests
	//   X-RateLimit-Limit: 2
	//   X-RateLimit-Remaining: 0
	//   X-RateLimit-Reset: 1800000060
	//   RateLimit-Policy: "endpoint:/search";q=2;w=60
	//   RateLimit: "endpoint:/search";r=0;t=30
	//   Retry-After: 30
	//   {"error":"rate_limit_exceeded","message":"Too many requests. Please retry after 30 seconds.","retry_after":30}
}

// The middleware in front of a handler with a rules file that reloads: a
// rules.Watcher's Current method is the rules source, so each request sees
// the rules of the file as last loaded, and a reload takes effect on the
// next request. An invalid file keeps the rules in force.
func Example_reloadingRules() {
	dir, err := os.MkdirTemp("", "rules")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.yaml")
	write := func(requests int) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, fmt.Appendf(nil, "rate_limits:\n  default: {requests: %d, window: 60}\n", requests), 0o600); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // atomically, as editors and Kubernetes do
			log.Fatal(err)
		}
	}
	write(100)
	reloaded := make(chan *rules.Rules, 1)
	w, err := rules.Watch(context.Background(), path, rules.WatchOptions{
		OnChange: func(r *rules.Rules) { reloaded <- r },
		OnError:  func(err error) { log.Print(err) }, // an invalid file keeps the current rules
	})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	lim, err := hybrid.New(hybrid.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())
	limit, err := middleware.New(middleware.Config{Limiter: lim, Rules: w.Current})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(limit(http.NotFoundHandler()))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	limitOf := func() string {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-RateLimit-Limit")
	}
	fmt.Println("limit:", limitOf())
	write(50)
	<-reloaded
	fmt.Println("limit after the reload:", limitOf())
	// Output:
	// limit: 100
	// limit after the reload: 50
}

// Several keys at once, and a custom OnError that logs before answering as
// the default does: 400 for a malformed key.
func ExampleDefaultOnError() {
	lim, err := hybrid.New(hybrid.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())
	rs, err := rules.Compile(&rules.Config{Default: &rules.Rule{Requests: 100, Window: time.Minute}})
	if err != nil {
		log.Fatal(err)
	}
	ip := httpkey.IPResolver{}
	limit, err := middleware.New(middleware.Config{
		Limiter: lim,
		Rules:   rules.Static(rs),
		IP:      ip,
		// Keyed by address and API key together: neither a new key nor a
		// new address buys a fresh budget on its own.
		Client: httpkey.All(httpkey.IP(ip), httpkey.APIKey(httpkey.APIKeyConfig{})),
		OnError: func(w http.ResponseWriter, r *http.Request, err error) {
			fmt.Println("logged:", err)
			middleware.DefaultOnError(w, r, err)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(limit(http.NotFoundHandler()))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("X-API-Key", strings.Repeat("k", 300))
	resp, err := srv.Client().Do(req)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status)
	fmt.Println(string(body))
	// Output:
	// logged: middleware: client key: httpkey: malformed key: X-API-Key is 300 bytes, longer than 256
	// 400 Bad Request
	// {"error":"bad_request","message":"The request's client key is malformed."}
}

// OnDenied shapes the answer to a denied request: here an RFC 9457 problem
// document. The rate-limit headers and Retry-After are already set when it
// runs; it writes the status and the body.
func ExampleConfig_onDenied() {
	lim, err := hybrid.New(hybrid.Config{Clock: clock.NewManual(time.Unix(1_800_000_000, 0))})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())
	rs, err := rules.Compile(&rules.Config{Default: &rules.Rule{Requests: 1, Window: time.Minute}})
	if err != nil {
		log.Fatal(err)
	}
	limit, err := middleware.New(middleware.Config{
		Limiter: lim,
		Rules:   rules.Static(rs),
		OnDenied: func(w http.ResponseWriter, r *http.Request, d middleware.Denial) {
			if d.Outcome != observe.Limited {
				middleware.DefaultOnDenied(w, r, d) // bans and fail-closed answers as usual
				return
			}
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(d.Status)
			fmt.Fprintf(w, `{"type":"https://example.com/probs/quota","title":"Quota exceeded","detail":"%d of %d per minute used; retry in %v."}`+"\n",
				d.Check.Limit.Rate-d.Decision.Remaining, d.Check.Limit.Rate, d.RetryAfter)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(limit(http.NotFoundHandler()))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	for range 2 {
		resp, err := srv.Client().Get(srv.URL + "/orders")
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s (%s) Retry-After=%q\n", resp.Status, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"))
		fmt.Print(string(body))
	}
	// Output:
	// 404 Not Found (text/plain; charset=utf-8) Retry-After=""
	// 404 page not found
	// 429 Too Many Requests (application/problem+json) Retry-After="60"
	// {"type":"https://example.com/probs/quota","title":"Quota exceeded","detail":"1 of 1 per minute used; retry in 1m0s."}
}
