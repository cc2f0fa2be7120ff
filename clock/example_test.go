package clock_test

import (
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/clock"
)

// The offset to Redis server TIME from round trips: the sample with the
// shortest round trip wins, since its answer could have been produced in the
// narrowest window, and half that round trip is the uncertainty.
func ExampleOffset() {
	local := time.Unix(1_700_000_000, 0)
	o := clock.NewOffset(local)
	// Redis's clock is 250 ms ahead of this node's.
	const ahead = 250 * time.Millisecond

	// A slow round trip (20 ms), the server answering 15 ms after the send.
	o.Observe(local, local.Add(15*time.Millisecond+ahead), local.Add(20*time.Millisecond))
	off, unc, _ := o.Estimate()
	fmt.Println("after a 20 ms round trip:", off, "±", unc)

	// A fast one (2 ms), answered in its middle: a better sample.
	sent := local.Add(time.Second)
	o.Observe(sent, sent.Add(time.Millisecond+ahead), sent.Add(2*time.Millisecond))
	off, unc, _ = o.Estimate()
	fmt.Println("after a 2 ms round trip: ", off, "±", unc)
	// Output:
	// after a 20 ms round trip: 255ms ± 10ms
	// after a 2 ms round trip:  250ms ± 1ms
}

// A manual clock moves only when told: tests of time-based logic run
// without sleeping.
func ExampleManual() {
	c := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c.Advance(1500 * time.Millisecond)
	fmt.Println(c.Now().Format(time.StampMilli))
	// Output:
	// Jan  1 00:00:01.500
}

// A node clock that jumps five minutes ahead is a step: recognised at the
// first round trip after it, applied at once, and told to OnStep so the
// limiter can bring its state back.
func ExampleOffset_OnStep() {
	local := time.Unix(1_700_000_000, 0)
	o := clock.NewOffset(local)
	o.OnStep(func(s clock.Step) { fmt.Println("step by", s.By) })
	redis := func(at time.Time) time.Time { return at.Add(250 * time.Millisecond) } // Redis runs 250 ms ahead

	o.Observe(local, redis(local.Add(time.Millisecond)), local.Add(2*time.Millisecond))
	// Ten seconds later the node's clock reads five minutes more than it should.
	real := local.Add(10 * time.Second)
	jumped := real.Add(5 * time.Minute)
	o.Observe(jumped, redis(real.Add(time.Millisecond)), jumped.Add(2*time.Millisecond))
	fmt.Println("mapped time is Redis's again:", time.Unix(0, o.Map(jumped.Add(2*time.Millisecond))).Sub(redis(real.Add(2*time.Millisecond))))
	fmt.Println("steps:", o.Steps())
	// Output:
	// step by -5m0s
	// mapped time is Redis's again: 0s
	// steps: 1
}
