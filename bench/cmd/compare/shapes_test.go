package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/bench/contender"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

// The shapes at a tiny scale, on a private redis-server and a Gubernator
// cluster: every fleet is sent every request of every shape, and the report
// has a row for each.
func TestShapesTinyScale(t *testing.T) {
	srv, err := redisproc.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	o := options{nodes: 4, only: regexp.MustCompile(""), shapes: shapesOptions{on: true, only: true,
		policy: contender.Policy{Rate: 100, Burst: 10}, rounds: 2, abuse: 200 * time.Millisecond, over: 4}}
	rs, err := measureShapes(context.Background(), o, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	fleets := []string{"hybridlimit Async", "hybridlimit Sync", "Gubernator default", "Gubernator GLOBAL"}
	if len(rs) != len(fleets)*len(shapes) {
		t.Fatalf("%d results, want %d fleets × %d shapes", len(rs), len(fleets), len(shapes))
	}
	burst := o.shapes.policy.Burst
	for i, r := range rs {
		f, s := fleets[i/len(shapes)], shapes[i%len(shapes)]
		if r.fleet.name != f || r.shape != s.name {
			t.Fatalf("result %d is %s / %s, want %s / %s", i, r.fleet.name, r.shape, f, s.name)
		}
		var sum int64
		for _, n := range r.rounds {
			sum += n
		}
		if want := int64(len(s.plan(o, 0))); r.offered != want || r.errors != 0 || r.admitted > r.offered || sum != r.admitted || r.latency.Count() != uint64(r.offered) {
			t.Errorf("%s, %s: offered %d (want %d), %d errors (first %v), admitted %d, rounds %v, %d latencies",
				f, s.name, r.offered, want, r.errors, r.firstError, r.admitted, r.rounds, r.latency.Count())
		}
	}
	// Each burst round comes after a full refill: an exact limiter admits
	// at least the burst in each, whatever the machine's speed.
	for i, r := range rs {
		if i%len(shapes) == len(shapes)-1 {
			continue // the abusive client: one round
		}
		if len(r.rounds) != o.shapes.rounds || r.exact < int64(o.shapes.rounds)*burst {
			t.Errorf("%s, %s: %d rounds, exact %d, want %d rounds and at least %d", r.fleet.name, r.shape, len(r.rounds), r.exact, o.shapes.rounds, int64(o.shapes.rounds)*burst)
		}
	}

	var b strings.Builder
	rep := report{opts: o, shapes: rs}
	if err := rep.write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"# hybridlimit against peer rate limiters: traffic shapes", "## Traffic shapes: hybridlimit and Gubernator",
		"| sticky burst | Gubernator GLOBAL |", "| abusive client spread over the nodes | hybridlimit Async |", "| Gubernator default | `github.com/gubernator-io/gubernator/v2@v2.13.0` | `RateLimitReq{Algorithm: LEAKY_BUCKET"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
