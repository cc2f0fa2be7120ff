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

// Every transition reaches OnTransition once, in order, outside the
// breaker's locks, with the failure that opened it: where a limiter logs.
func ExampleSettings_onTransition() {
	b := breaker.New(breaker.Settings{Name: "redis", Failures: 2, OpenFor: time.Minute,
		OnTransition: func(tr breaker.Transition) { fmt.Printf("%v -> %v (cause: %v)\n", tr.From, tr.To, tr.Cause) }})
	for _, err := range []error{errors.New("connection refused"), errors.New("i/o timeout")} {
		_, _ = breaker.Call(context.Background(), b, 0, func(context.Context) (int, error) { return 0, err })
	}
	// Output:
	// closed -> open (cause: i/o timeout)
}
