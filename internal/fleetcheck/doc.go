// Package fleetcheck searches for violations of what the limiter promises a
// fleet: it runs fleets of real hybrid.Limiter nodes, each with its own Redis
// client, against a private redis-server it starts (internal/redistest),
// under traffic generated from a seed, records every decision, and checks
// the record.
//
// # A scenario
//
// Generate draws a Scenario from a seed: the mode (mostly Async, some Sync
// and LocalOnly), 2 to 8 nodes (1 to 4 local ones), the interval, a second
// or three of traffic, perhaps a small MaxKeys, nodes joining and leaving,
// a fault of Redis mid-run (SIGKILL and an empty restart, SIGSTOP and
// SIGCONT, or latency added by a TCP proxy, internal/faultproxy) under one
// of the three fallbacks, and keys whose traffic takes one shape each:
// steady over the limit, a hot node that rotates, on/off bursts aligned with
// reconcile rounds, weights from 1 to the capacity, shares gone stale (each
// node alone on the key in turn, idle, then all at once), traffic migrating
// from one node to all, compliant traffic, hundreds of churning keys against
// a small MaxKeys, idle keys that hold shares, and the sliding window log in
// Async mode (which must be refused with ErrUnsupported). A key may carry
// several limits, each deciding every request. All five algorithms appear.
// Every request is drawn up front, so the seed alone replays a scenario.
//
// Run drives it for real: each node on its own goroutine, sending its
// requests at their times; the fault caused from the test's goroutine; then
// quiescence: the nodes recover, close (reporting what they spent), and
// Redis's record of spend is read.
//
// # The checks
//
// Check holds the record to these, per key and limit:
//
//   - the bound (Bound): the weight admitted within every closed window of
//     one interval, the limit's period, one second and the whole run, found
//     exactly from the sorted admission times (MaxOver), never exceeds
//     Bound for that length. ExactMax is what one exact limiter of each
//     algorithm admits; a test walks the local engine through each and finds
//     it reached.
//   - compliance (Conforms): traffic below a stated fraction of the limit is
//     never refused, across outages included, as far as the requests, at the
//     times they were decided, conform to the same algorithm at that
//     fraction of the rate and burst; except where Redis is failing
//     (counted apart) and, for a stream pinned, hopping or in bursts,
//     decisions made degraded, where each node holds one over the fleet of
//     the limit and cannot know what the others admit. Each decision left
//     out is counted by why (Result.Excluded).
//   - the ledger: after quiescence Redis holds what the fleet admitted, or
//     the nodes' Stats().Reconcile.LostSpend (or a failed Close) accounts for
//     the rest. ledger.go alone knows how Redis records spend.
//   - no decision errs (but the log's in Async mode, which must), every node
//     starts, every node recovers once Redis is back, and every Close
//     reports all the node spent (nodes close while Redis is up).
//
// What each fallback must satisfy while degraded: Conservative the bound and
// compliance, like any other time; FailClosed the bound, and it may refuse
// compliant traffic, but only in degraded decisions; FailOpen admits
// everything while degraded, so its degraded admissions are left out of the
// windows, while compliance and everything admitted otherwise are held as
// usual.
//
// # Running it
//
// The package's own tests (the window maxima, the exact maxima against the
// local engine, compliance, the generator, the checks, two real runs) run in
// make test, and so does a fixed set of seeds (TestFixedSet); the long
// randomized run (TestVerify) runs when asked how many scenarios, as make
// verify does. A failure prints its seed and the command that replays it:
//
//	go test ./internal/fleetcheck -run TestReplay -seed=123 -v
package fleetcheck
