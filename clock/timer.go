package clock

import (
	"sync"
	"time"
)

// Sleeper is a Clock that can also wake a waiter once some of its time has
// passed. Real and Manual are Sleepers; a limiter whose Clock is not one
// waits on the real clock.
type Sleeper interface {
	Clock
	// After returns a channel that receives the clock's time once d has
	// passed on it (at once for d <= 0), and a function that releases the
	// wait early; calling it after the channel fired does nothing.
	After(d time.Duration) (<-chan time.Time, func())
}

// After is time.NewTimer's channel and Stop.
func (Real) After(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// manualWaiter is one pending After of a Manual clock.
type manualWaiter struct {
	at int64 // Unix ns at which it fires
	ch chan time.Time
}

// waiters are a Manual clock's pending Afters. The zero value is empty.
type waiters struct {
	mu   sync.Mutex
	list []*manualWaiter
}

// After returns a channel that receives the clock's time once Set or
// Advance has moved it d or more past its reading now.
func (m *Manual) After(d time.Duration) (<-chan time.Time, func()) {
	w := &manualWaiter{at: m.ns.Load() + int64(d), ch: make(chan time.Time, 1)}
	m.w.mu.Lock()
	m.w.list = append(m.w.list, w)
	m.w.mu.Unlock()
	m.fire() // d <= 0, or the clock moved meanwhile
	return w.ch, func() { m.drop(w) }
}

// Waiters returns the number of pending Afters: a test advances the clock
// once the goroutine it drives is waiting.
func (m *Manual) Waiters() int {
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	return len(m.w.list)
}

// fire wakes every waiter whose time has come.
func (m *Manual) fire() {
	now := m.ns.Load()
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	kept := m.w.list[:0]
	for _, w := range m.w.list {
		if w.at <= now {
			w.ch <- time.Unix(0, now) // buffered, and sent to once
			continue
		}
		kept = append(kept, w)
	}
	clear(m.w.list[len(kept):])
	m.w.list = kept
}

// drop removes w if it is still pending.
func (m *Manual) drop(w *manualWaiter) {
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	for i, x := range m.w.list {
		if x == w {
			m.w.list = append(m.w.list[:i], m.w.list[i+1:]...)
			return
		}
	}
}
