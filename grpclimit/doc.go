// Package grpclimit rate-limits the calls of a google.golang.org/grpc
// server with a hybrid.Limiter and the rules of package rules: New returns
// Interceptors whose Unary and Stream methods are server interceptors.
//
//	ic, err := grpclimit.New(grpclimit.Config{Limiter: lim, Rules: watcher.Current})
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(ic.Unary()),
//		grpc.ChainStreamInterceptor(ic.Stream()),
//	)
//
// # Methods as endpoints
//
// A gRPC call is an HTTP/2 POST whose path is the call's full method,
// "/package.Service/Method", and the rules see it so: the endpoint rules
// match the full method as a path, with method POST. So, in a rules file,
//
//	endpoints:
//	  /helloworld.Greeter/SayHello: {requests: 10, window: 1}   # one method
//	  /helloworld.Greeter/*: {requests: 100, window: 1}         # every other method of the service
//
// and, as for HTTP, an exact method beats its service's subtree, a longer
// subtree beats a shorter one, and a call no endpoint rule matches falls to
// the default rule. The rule names read "endpoint:/helloworld.Greeter/SayHello".
// A "POST /helloworld.Greeter/SayHello" pattern matches too; a pattern with
// another HTTP method never does. A server refuses calls to methods it does
// not serve before any interceptor runs, unless it has an
// UnknownServiceHandler; then a made-up method matches no endpoint rule and
// falls to the default rule, whose key holds the client and not the method,
// so made-up names buy no budget.
//
// # Who the client is
//
// Bans and the per_ip rule use the peer's address (Config.IP), or, when the
// peer is a trusted proxy, the forwarding metadata its IPResolver chooses
// (forwarded, x-forwarded-for), exactly as the HTTP middleware reads
// forwarding headers. The per-client rules (tier, endpoint, default) key the
// client by Config.Client, an httpkey.Extractor that sees the call as the
// HTTP request it is: POST to the full method, RemoteAddr the peer, the
// incoming metadata as its header (names in canonical form, values as
// received), and the call's context. So
//
//	httpkey.APIKey(httpkey.APIKeyConfig{Header: "x-api-key"})    // a metadata value: "key:<value>"
//	httpkey.First(httpkey.User(userOf), httpkey.IP(resolver))    // the authenticated user, else the address
//	httpkey.All(httpkey.IP(resolver), httpkey.Endpoint())        // address and method together
//
// all work unchanged. The default is the peer's address, "ip:203.0.113.7"
// (IPv6 grouped by /64).
//
// # Denials
//
// A call a live check denies ends, before its handler runs, with
// codes.ResourceExhausted; a banned address with codes.PermissionDenied; a
// client under the rules' penalty block with codes.ResourceExhausted; and,
// while a FailClosed limiter is degraded, codes.Unavailable. Every one but
// the ban carries its retry delay twice:
//
//   - as a status detail, google.rpc.RetryInfo (errdetails.RetryInfo, from
//     google.golang.org/genproto/googleapis/rpc, the module grpc-go itself
//     uses for status details), with a google.rpc.QuotaFailure naming the
//     rule for a limited or blocked call. This is Google's API design
//     convention (AIP-193) and what application code reads:
//     status.Convert(err).Details();
//   - as trailer metadata grpc-retry-pushback-ms, whole milliseconds
//     rounded up: the server pushback of gRPC's retry design (gRFC A6),
//     which gRPC's own client retries obey when the client's retry policy
//     lists the status code, without any application code. They cannot
//     read status details; this is why both are sent.
//
// The trailers also carry retry-after (whole seconds, rounded up, at least
// 1, as HTTP's Retry-After) and, for a limited call, x-ratelimit-limit and
// x-ratelimit-remaining of the denying check. Admitted calls get no
// metadata of ours. Config.OnDenied replaces the error (the trailers are
// set before it runs); DefaultOnDenied is the default.
//
// # Streams
//
// A stream is checked once, when it opens, with a cost of Config.Cost(ctx,
// method, nil); its messages are not counted. A stream refused ends with the
// error above before its handler runs, and the client's first Recv returns
// it.
//
// # Errors
//
// A call that cannot be checked (no client key, a malformed one, an address
// that cannot be read, a negative cost, a limit the limiter refuses) ends
// with Config.OnError's error: by default InvalidArgument for a malformed
// client key, Internal otherwise, with a message that does not echo the
// cause. Errors on shadow checks are logged and the check skipped.
//
// Evaluation follows the HTTP middleware's order and rules (ban, penalty,
// then global, per_ip, per_user, tier, endpoint or default; shadow mode;
// priority reserve): see package middleware.
package grpclimit
