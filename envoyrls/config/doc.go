// Package config reads envoyproxy/ratelimit's YAML configuration, unchanged,
// and answers which rate limit applies to a descriptor, the way
// envoyproxy/ratelimit does.
//
// A configuration is a set of files, each with a domain and a tree of
// descriptors:
//
//	domain: edge_proxy_per_ip
//	descriptors:
//	  - key: remote_address          # any value: one counter per address
//	    rate_limit:
//	      unit: second
//	      requests_per_unit: 10
//	  - key: remote_address
//	    value: 50.0.0.5              # this value: more specific, wins
//	    rate_limit:
//	      unit: second
//	      requests_per_unit: 0       # blocked
//
// Every field of envoyproxy/ratelimit's format is read with its meaning:
// key, value (with the "*" wildcard suffix), rate_limit (unit second …
// year, requests_per_unit, unlimited, name, replaces), shadow_mode,
// quota_mode, detailed_metric, value_to_metric and share_threshold. Two
// fields are this project's, and sit inside rate_limit beside theirs:
//
//	rate_limit:
//	  unit: second
//	  requests_per_unit: 100
//	  algorithm: token_bucket        # or leaky_bucket, fixed_window, sliding_window_counter, sliding_window_log
//	  burst: 20                      # the buckets' capacity; zero means requests_per_unit
//
// Without an algorithm a limit is enforced exactly as envoyproxy/ratelimit
// enforces it (see Rule.EnvoyCounting), so a migration changes no decision.
//
// Every problem is reported as an *Error naming the file, line, column and
// field, and a file envoyproxy/ratelimit refuses is refused here too.
// Parse and Load build a Config; LoadDir reads a directory as
// envoyproxy/ratelimit's runtime directory; Watch keeps a Config current as
// the directory changes, keeping the old one when a new file is bad.
package config
