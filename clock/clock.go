// Package clock supplies time to the limiter: the Clock interface, the real
// clock, a manual clock for tests, and Offset, which maps this node's clock
// onto Redis server TIME so that every node decides on the same timeline.
//
// Nothing in the limiter reads time.Now directly: time is a parameter or an
// injected Clock, so no unit test sleeps. Two clocks are the system's by
// nature, and are only ever compared with it: the circuit breaker's
// (gobreaker times its open state with time.Now; breaker.ProbeIn) and a
// context's deadline (time.Until, how long a caller may still wait).
package clock

import (
	"sync/atomic"
	"time"
)

// Clock tells the time. Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// Real is the system clock. The zero value is ready to use.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Manual is a clock that moves only when told to, for tests that walk fixed
// instants instead of sleeping. It is safe for concurrent use; the zero value
// reads as the Unix epoch.
type Manual struct {
	ns atomic.Int64
	w  waiters
}

// NewManual returns a manual clock reading t.
func NewManual(t time.Time) *Manual {
	m := &Manual{}
	m.Set(t)
	return m
}

// Now returns the clock's current reading.
func (m *Manual) Now() time.Time { return time.Unix(0, m.ns.Load()) }

// Set moves the clock to t, forwards or backwards, and wakes the Afters
// whose time has come.
func (m *Manual) Set(t time.Time) {
	m.ns.Store(t.UnixNano())
	m.fire()
}

// Advance moves the clock by d (backwards when d is negative), wakes the
// Afters whose time has come, and returns the new reading.
func (m *Manual) Advance(d time.Duration) time.Time {
	t := time.Unix(0, m.ns.Add(int64(d)))
	m.fire()
	return t
}
