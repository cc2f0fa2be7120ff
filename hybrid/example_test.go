package hybrid_test

import (
	"context"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// A limiter without Redis decides from memory alone (LocalOnly). With
// Config.Redis set, the same calls decide in memory and reconcile with
// Redis (Async, the default) or decide in Redis (Sync).
func ExampleNew() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0)) // a fixed instant, so the output is fixed
	lim, err := hybrid.New(hybrid.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	limit := hybrid.PerSecond(10).WithBurst(2)
	for range 3 {
		d, err := lim.Allow(context.Background(), "user:42", limit)
		if err != nil {
			panic(err) // a caller's mistake: an empty key, an invalid limit
		}
		fmt.Printf("allowed=%v remaining=%d retry-after=%v source=%v\n", d.Allowed, d.Remaining, d.RetryAfter, d.Source)
	}
	// Output:
	// allowed=true remaining=1 retry-after=0s source=local
	// allowed=true remaining=0 retry-after=0s source=local
	// allowed=false remaining=0 retry-after=100ms source=local
}

// Wait queues a request in a leaky bucket and blocks until its turn.
func ExampleLimiter_Wait() {
	lim, err := hybrid.New(hybrid.Config{})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	smooth := hybrid.PerSecond(50).WithBurst(5).WithAlgorithm(hybrid.LeakyBucket) // one every 20 ms
	start := time.Now()
	for range 3 {
		if err := lim.Wait(context.Background(), "export-job", smooth); err != nil {
			panic(err)
		}
	}
	fmt.Println("three requests, spaced:", time.Since(start) >= 40*time.Millisecond)
	// Output: three requests, spaced: true
}

// Reserve admits a request now or later, as golang.org/x/time/rate's does:
// the token bucket goes into debt and the Delay says when to act. A
// reservation that will not be used is given back with Cancel.
func ExampleLimiter_ReserveN() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0)) // a fixed instant, so the output is fixed
	lim, err := hybrid.New(hybrid.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	ctx := context.Background()
	limit := hybrid.PerSecond(10).WithBurst(2) // two at once, then one per 100 ms
	var last *hybrid.Reservation
	for range 4 {
		last, err = lim.Reserve(ctx, "batch", limit)
		if err != nil {
			panic(err)
		}
		fmt.Println("act in", last.Delay())
	}
	if err := last.Cancel(ctx); err != nil { // the fourth will not be needed
		panic(err)
	}
	r, err := lim.ReserveN(ctx, "batch", limit, 2)
	if err != nil {
		panic(err)
	}
	fmt.Println("two more act in", r.Delay())
	// Output:
	// act in 0s
	// act in 0s
	// act in 100ms
	// act in 200ms
	// two more act in 300ms
}

// Reset forgives a client: its key starts afresh. With Redis, it is
// forgiven on every node.
func ExampleLimiter_Reset() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	lim, err := hybrid.New(hybrid.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	ctx := context.Background()
	daily := hybrid.Per(2, 24*time.Hour)
	for range 3 {
		d, _ := lim.Allow(ctx, "customer:7", daily)
		fmt.Println("allowed:", d.Allowed)
	}
	if err := lim.Reset(ctx, "customer:7", daily); err != nil {
		panic(err) // Redis could not be reached: not forgiven
	}
	d, _ := lim.Allow(ctx, "customer:7", daily)
	fmt.Println("after the reset:", d.Allowed, "remaining", d.Remaining)
	// Output:
	// allowed: true
	// allowed: true
	// allowed: false
	// after the reset: true remaining 1
}

// A quota per calendar month in a time zone: 3 requests from midnight on
// the first, Paris time. ResetAfter (and so X-RateLimit-Reset) says when
// the month ends there.
func ExamplePerCalendar() {
	paris, _ := time.LoadLocation("Europe/Paris")
	clk := clock.NewManual(time.Date(2026, 10, 31, 22, 30, 0, 0, paris))
	lim, err := hybrid.New(hybrid.Config{Clock: clk}) // or Mode: hybrid.Sync with Redis
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	monthly := hybrid.PerCalendar(3, hybrid.Month, "Europe/Paris")
	for range 4 {
		d, _ := lim.Allow(context.Background(), "customer:7", monthly)
		fmt.Printf("allowed=%v remaining=%d reset-after=%v\n", d.Allowed, d.Remaining, d.ResetAfter)
	}
	clk.Advance(90 * time.Minute) // November, in Paris
	d, _ := lim.Allow(context.Background(), "customer:7", monthly)
	fmt.Printf("allowed=%v remaining=%d reset-after=%v\n", d.Allowed, d.Remaining, d.ResetAfter)
	// Output:
	// allowed=true remaining=2 reset-after=1h30m0s
	// allowed=true remaining=1 reset-after=1h30m0s
	// allowed=true remaining=0 reset-after=1h30m0s
	// allowed=false remaining=0 reset-after=1h30m0s
	// allowed=true remaining=2 reset-after=720h0m0s
}
