// Package httpkey decides which client an HTTP request belongs to, as the key
// a rate limiter counts it under.
//
// An Extractor turns a request into a key. The sources, each with a prefix so
// that keys from different sources never meet:
//
//   - IP: the client's address, "ip:203.0.113.7", with IPv6 clients grouped
//     by their /64 as "ip:2001:db8:1:2::/64". Forwarding headers (RFC 7239
//     Forwarded, X-Forwarded-For) are believed only from configured trusted
//     proxies; see IPResolver.
//   - APIKey: an API key header, "key:<value>", or "keyhash:<32 hex digits>"
//     when the key must not appear in logs and metrics; see APIKeyConfig.
//   - User: the authenticated user the application put in the request
//     context, "user:<id>".
//   - Endpoint: the route, "endpoint:GET /x".
//
// Two combinators build policies from them:
//
//   - First(User(...), APIKey(...), IP(...)) keys by the first source that
//     has something: the user if authenticated, else the API key, else the
//     address. A source with nothing returns ErrNoKey, and First moves on.
//   - All(IP(...), User(...), Endpoint()) keys by every part at once,
//     "ip:1.2.3.4|user:42|endpoint:GET /x", so that neither a new account
//     nor a new address buys a fresh budget on its own. Parts are escaped:
//     two different part lists never produce the same key.
//
// Addresses: a client can write anything in X-Forwarded-For or Forwarded, so
// IPResolver believes them only when the connection comes from one of its
// TrustedProxies, reads them from the nearest hop leftwards, and stops at the
// first address that is not a trusted proxy, or at anything malformed. Which
// header it reads is a HeaderPolicy: by default only Forwarded, the
// standardized one; set XForwardedForOnly behind proxies that write only
// that (most do).
//
// Every Extractor is safe for concurrent use: the constructors copy their
// configuration, and none keeps state between requests.
package httpkey
