package contender

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

var addr string

func TestMain(m *testing.M) {
	s, err := redisproc.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "contender tests need redis-server:", err)
		os.Exit(1)
	}
	addr = s.Addr()
	code := m.Run()
	_ = s.Close()
	os.Exit(code)
}

// A slow refill (1/s) so that nothing comes back during a test.
var testPolicy = Policy{Rate: 1, Burst: 10}

func newInstance(t *testing.T, c Contender, prefix string) Limiter {
	t.Helper()
	return newInstanceIn(t, c, Env{Addr: addr, Prefix: prefix})
}

func newInstanceIn(t *testing.T, c Contender, env Env) Limiter {
	t.Helper()
	l, err := c.New(env, testPolicy)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

func take(t *testing.T, l Limiter, key string, n int) (admitted int) {
	t.Helper()
	for range n {
		ok, err := l.Allow(context.Background(), key)
		if err != nil {
			t.Fatalf("Allow: %v", err)
		}
		if ok {
			admitted++
		}
	}
	return admitted
}

// Every contender admits the burst on a new key and then limits.
func TestBurstThenLimit(t *testing.T) {
	for i, c := range All() {
		t.Run(c.Name, func(t *testing.T) {
			l := newInstance(t, c, fmt.Sprintf("t%d:", i))
			if got := take(t, l, "k", int(testPolicy.Burst)); got != int(testPolicy.Burst) {
				t.Fatalf("admitted %d of the first %d, want all of them", got, testPolicy.Burst)
			}
			if got := take(t, l, "k", 5); got != 0 {
				t.Fatalf("admitted %d past the burst, want 0", got)
			}
			// Keys are independent (the single x/time/rate limiter ignores them).
			if c.Name != "x/time/rate single limiter" {
				if got := take(t, l, "other", 1); got != 1 {
					t.Fatalf("a new key was refused")
				}
			}
		})
	}
}

// Distributed instances with the same prefix share one limit: what one node
// spent, the other cannot spend again.
func TestNodesShareTheLimit(t *testing.T) {
	for i, c := range All() {
		if !c.Distributed {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			prefix := fmt.Sprintf("s%d:", i)
			// Our Async: a's burst past its even split needs b's join, which
			// a call on the fleet's channel brings at once once b has
			// subscribed (else b's next heartbeat). What this test checks is
			// that the nodes share the limit, not how fast: AskWait is long
			// enough for a loaded machine to answer a's asks.
			env := Env{Addr: addr, Prefix: prefix, AskWait: 2 * time.Second}
			a, b := newInstanceIn(t, c, env), newInstanceIn(t, c, env)
			time.Sleep(5 * AsyncInterval)
			if got := take(t, a, "k", int(testPolicy.Burst)); got != int(testPolicy.Burst) {
				t.Fatalf("node a admitted %d of the burst %d", got, testPolicy.Burst)
			}
			switch c.Consistency {
			case "strong":
				if got := take(t, b, "k", 5); got != 0 {
					t.Fatalf("node b admitted %d after node a spent the burst, want 0", got)
				}
			case "eventual":
				// After a few reconciliation rounds node b has seen a's spend,
				// except for a new key's first allowance (at most burst·(N−1)/N,
				// docs/accuracy.md).
				time.Sleep(20 * AsyncInterval)
				if got := take(t, b, "k", 10); got > int(testPolicy.Burst)/2 {
					t.Fatalf("node b admitted %d after node a spent the burst, want at most %d", got, testPolicy.Burst/2)
				}
			default:
				t.Fatalf("distributed contender with consistency %q", c.Consistency)
			}
		})
	}
}

// Our instances give each decision's Source and their counters: Sync asks
// Redis for every decision, LocalOnly never does, and Decide spends as
// Allow does.
func TestOurInstancesSayWhereADecisionCameFrom(t *testing.T) {
	for i, c := range All() {
		if !strings.HasPrefix(c.Name, "hybridlimit ") {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			l := newInstance(t, c, fmt.Sprintf("h%d:", i))
			h, ok := l.(Hybrid)
			if !ok {
				t.Fatal("not a Hybrid")
			}
			var admitted int64
			for range testPolicy.Burst + 3 {
				d, err := h.Decide(context.Background(), "k")
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
				}
				want := hybrid.Local
				if c.Consistency == "strong" {
					want = hybrid.Remote
				}
				if d.Source != want && c.Consistency != "eventual" {
					t.Fatalf("source %v, want %v", d.Source, want)
				}
			}
			if admitted != testPolicy.Burst {
				t.Errorf("admitted %d, want the burst %d", admitted, testPolicy.Burst)
			}
			mode := map[string]hybrid.Mode{"LocalOnly": hybrid.LocalOnly, "Sync": hybrid.Sync, "Sync,": hybrid.Sync, "Async": hybrid.Async}[strings.Fields(c.Name)[1]]
			if got := h.Stats().Mode; got != mode {
				t.Errorf("Stats().Mode %v, want %v", got, mode)
			}
		})
	}
}
