package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/breaker"
)

// Three failed calls open the breaker; while it is open no call is made,
// and the caller learns at once, without waiting on the dependency.
func ExampleCall() {
	b := breaker.New(breaker.Settings{Name: "redis", Failures: 3, OpenFor: time.Minute})
	down := errors.New("connection refused")
	calls := 0
	ping := func(context.Context) (string, error) { calls++; return "", down }

	for range 5 {
		_, err := breaker.Call(context.Background(), b, 0, ping)
		fmt.Printf("%-24v open error: %-5v state %v\n", err, errors.Is(err, breaker.ErrOpen), b.State())
	}
	fmt.Println("calls made:", calls)
	// Output:
	// connection refused       open error: false state closed
	// connection refused       open error: false state closed
	// connection refused       open error: false state open
	// breaker: open: redis     open error: true  state open
	// breaker: open: redis     open error: true  state open
	// calls made: 3
}
