package httpkey

import (
	"errors"
	"net/http"
	"strings"
)

// Endpoint returns an Extractor that keys requests by what they ask for:
// "endpoint:" then the method, a space, and the route, "endpoint:GET /x". An
// empty method is GET, as net/http reads it.
// Combined with other sources in All, it gives each endpoint its own budget.
//
// The route is the path of the http.ServeMux pattern that matched
// (r.Pattern, "/users/{id}", with any method in the pattern dropped, since the
// request's own is used), so that "/users/1" and "/users/2" share a budget.
// If the request has not been routed yet, because the limiter wraps the mux
// rather than the handlers, r.Pattern is empty and the route is the raw
// r.URL.Path. Every distinct path then has its own budget, and a client can
// make up paths to get fresh ones: put the limiter after routing when the
// endpoint is part of the key.
func Endpoint() Extractor {
	errNoURL := errors.New("httpkey: request has no URL")
	return func(r *http.Request) (string, error) {
		route := r.Pattern
		if route == "" {
			if r.URL == nil {
				return "", errNoURL
			}
			route = r.URL.Path
		} else if i := strings.IndexAny(route, " \t"); i >= 0 {
			route = strings.TrimLeft(route[i:], " \t")
		}
		method := r.Method
		if method == "" {
			method = http.MethodGet // as net/http reads it
		}
		return "endpoint:" + method + " " + route, nil
	}
}
