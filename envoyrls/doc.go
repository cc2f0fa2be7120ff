// Package envoyrls is Envoy's rate limit service (RLS v3,
// envoy.service.ratelimit.v3.RateLimitService) answered from node memory
// by a hybrid.Limiter, with envoyproxy/ratelimit's configuration format
// (package config) unchanged.
//
// Envoy, Istio, Contour, Emissary, Gloo and Envoy Gateway call
// ShouldRateLimit with a domain and descriptors; the Service finds the
// rule of each descriptor as envoyproxy/ratelimit does, decides it with the
// limiter (in memory, reconciled through Redis in the background; in Redis
// in Sync mode), and answers with an overall code and one status per
// descriptor. While Redis is down the limiter keeps deciding from memory
// under its Fallback, so the service keeps answering, in microseconds.
//
// A rule without an algorithm is enforced exactly as envoyproxy/ratelimit
// enforces it: a fixed window aligned to the Unix epoch in units of its
// length (a month is 30 days, a year 365), counted per descriptor value,
// where the hits of denied requests count too. So a migration changes no
// decision. docs/envoy.md has the details, the differences, and the Envoy
// and Istio configuration.
//
// NewServer builds the gRPC server with the service and the gRPC health
// service; AdminHandler serves metrics and health over HTTP, on a listener
// of its own, and RulesHandler the configuration in force, for one an
// operator keeps private.
package envoyrls
