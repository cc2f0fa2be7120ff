// Package breaker is the circuit breaker around every Redis call the limiter
// makes (sony/gobreaker's two-step breaker), with each call's own short
// timeout.
//
// A failing or slow Redis opens the breaker; while it is open no call waits
// on Redis at all: Call returns ErrOpen at once, and callers decide from
// memory instead. After OpenFor, the next call is let through as a probe; its
// success closes the breaker.
//
// The state is mirrored into an atomic from gobreaker's OnStateChange (which
// runs under gobreaker's lock, so nothing there calls back into the breaker),
// and the hot path reads only that atomic: an open breaker costs a decision
// one load. Each transition is also queued there and handed to
// Settings.OnTransition after the call that caused it has left gobreaker,
// outside every lock, so a logger may take its time.
//
// A call cut short by its caller (a context canceled, or a deadline of the
// caller's that came before the breaker's own timeout) says nothing about
// the dependency: it is not counted at all.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// State is the breaker's state.
type State int32

// The breaker's states.
const (
	// Closed: calls go to Redis.
	Closed State = iota
	// HalfOpen: the next call probes Redis; its outcome closes or reopens.
	HalfOpen
	// Open: no call goes to Redis until OpenFor has passed.
	Open
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

// Errors Call returns instead of calling.
var (
	// ErrOpen: the breaker is open (or half-open with its probe in flight).
	ErrOpen = errors.New("breaker: open")
	// ErrTimeout: the call did not finish within its timeout. The call may
	// still be running; its result is discarded.
	ErrTimeout = errors.New("breaker: call timed out")
	// ErrBusy: too many calls are in flight (abandoned ones included): Redis
	// is not keeping up.
	ErrBusy = errors.New("breaker: too many calls in flight")
)

// Defaults for Settings' zero fields.
const (
	DefaultTimeout     = 50 * time.Millisecond
	DefaultOpenFor     = time.Second
	DefaultFailures    = 3
	DefaultMaxInFlight = 256
)

// Settings configure a Breaker. The zero value is usable.
type Settings struct {
	// Name labels the breaker in errors and metrics.
	Name string
	// Timeout bounds each call: a call that has not finished by then counts
	// as a failure, and Call returns ErrTimeout. A zero Timeout means 50 ms.
	Timeout time.Duration
	// OpenFor is how long the breaker stays open before it lets a probe
	// through. A zero OpenFor means 1 s.
	OpenFor time.Duration
	// Failures is how many consecutive failures open the breaker. Zero means 3.
	Failures uint32
	// MaxInFlight bounds the calls running at once, counting calls that
	// timed out but have not returned yet. Zero means 256.
	MaxInFlight int
	// Inline runs calls on the caller's goroutine, trusting fn to return by
	// its context's deadline. Leave it false unless the Redis client applies
	// context deadlines to its sockets (go-redis: ContextTimeoutEnabled):
	// otherwise a hung Redis holds the caller until the client's own read
	// timeout (3 s by default).
	Inline bool
	// IsSuccessful says which errors are not Redis's fault (a caller's
	// mistake, a key of another type): they count as successes. Nil means
	// only nil is a success.
	IsSuccessful func(err error) bool
	// IsExcluded says which errors say nothing about Redis (the caller's own
	// cancellation): they are not counted at all. Nil means none.
	IsExcluded func(err error) bool
	// OnStateChange, if set, is told of every transition. It runs under
	// gobreaker's lock: it must be quick, must not block, and must not call
	// the breaker (an atomic store, a metric).
	OnStateChange func(from, to State)
	// OnTransition, if set, is told of every transition too, with its cause,
	// but outside every lock: on the goroutine of the call that caused it (or
	// of a later call), once that call has left gobreaker. Transitions reach
	// it one at a time and in order. It may log, and may call the breaker.
	OnTransition func(Transition)
}

// Transition is one change of the breaker's state.
type Transition struct {
	From, To State
	// Cause is, for a transition to Open, the failure that opened the
	// breaker (for a probe that failed, the probe's). Nil otherwise.
	Cause error
	// At is when the transition happened.
	At time.Time
}

// Breaker guards calls to Redis. It is safe for concurrent use.
type Breaker struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	settings Settings
	state    atomic.Int32
	changes  atomic.Uint64
	openedAt atomic.Int64 // Unix ns of the last transition to Open
	inFlight chan struct{}

	// gate serializes the calls into gobreaker (Allow and done), so that the
	// state read right after Allow is the state that let the call through,
	// and the error a done reports is the cause of the transition it makes.
	// OnStateChange runs inside those calls and never takes it.
	gate  sync.Mutex
	cause error // the error being reported under gate

	queueMu sync.Mutex   // guards queue; taken under gobreaker's lock, never around a call into it
	queue   []Transition // transitions not yet handed to OnTransition
	telling sync.Mutex   // held (TryLock) by the one goroutine handing transitions out

	timeouts  atomic.Uint64
	rejected  atomic.Uint64
	failures  atomic.Uint64
	successes atomic.Uint64
	excluded  atomic.Uint64
	probes    atomic.Uint64
}

// New returns a closed Breaker.
func New(s Settings) *Breaker {
	if s.Timeout <= 0 {
		s.Timeout = DefaultTimeout
	}
	if s.OpenFor <= 0 {
		s.OpenFor = DefaultOpenFor
	}
	if s.Failures == 0 {
		s.Failures = DefaultFailures
	}
	if s.MaxInFlight <= 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	b := &Breaker{settings: s, inFlight: make(chan struct{}, s.MaxInFlight)}
	failures := s.Failures
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        s.Name,
		MaxRequests: 1,
		Timeout:     s.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsSuccessful: func(err error) bool {
			return err == nil || (s.IsSuccessful != nil && s.IsSuccessful(err))
		},
		IsExcluded: func(err error) bool {
			return errors.Is(err, errCallerGone) || (err != nil && s.IsExcluded != nil && s.IsExcluded(err))
		},
		// Under gobreaker's lock (and under gate, or inside an Allow): atomic
		// stores and a queue append, never a call back in.
		OnStateChange: func(_ string, from, to gobreaker.State) {
			f, t := fromGobreaker(from), fromGobreaker(to)
			now := time.Now() // gobreaker's clock: see ProbeIn
			b.state.Store(int32(t))
			b.changes.Add(1)
			tr := Transition{From: f, To: t, At: now}
			if t == Open {
				b.openedAt.Store(now.UnixNano())
				tr.Cause = b.cause
			}
			if s.OnStateChange != nil {
				s.OnStateChange(f, t)
			}
			if s.OnTransition != nil {
				b.queueMu.Lock()
				b.queue = append(b.queue, tr)
				b.queueMu.Unlock()
			}
		},
	})
	return b
}

// allow asks gobreaker to let a call through, and returns the state that let
// it through.
func (b *Breaker) allow() (func(error), State, error) {
	b.gate.Lock()
	done, err := b.cb.Allow()
	st := b.State()
	b.gate.Unlock()
	b.tell()
	return done, st, err
}

// finish reports a call's outcome to gobreaker, then hands out the
// transitions it caused.
func (b *Breaker) finish(done func(error), err error) {
	b.gate.Lock()
	b.cause = err
	done(err)
	b.cause = nil
	b.gate.Unlock()
	b.tell()
}

// tell hands queued transitions to OnTransition, in order, outside every
// lock but telling, which only one goroutine holds at a time and nobody
// waits for: a goroutine that finds it taken leaves its transitions to the
// holder, which looks again before it leaves.
func (b *Breaker) tell() {
	if b.settings.OnTransition == nil {
		return
	}
	for {
		if !b.telling.TryLock() {
			return
		}
		for {
			b.queueMu.Lock()
			if len(b.queue) == 0 {
				b.queueMu.Unlock()
				break
			}
			tr := b.queue[0]
			b.queue = b.queue[1:]
			b.queueMu.Unlock()
			b.settings.OnTransition(tr)
		}
		b.telling.Unlock()
		b.queueMu.Lock()
		more := len(b.queue) > 0
		b.queueMu.Unlock()
		if !more {
			return
		}
	}
}

func fromGobreaker(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return Open
	case gobreaker.StateHalfOpen:
		return HalfOpen
	}
	return Closed
}

// State returns the state as of the breaker's last transition, with one
// atomic load. An open breaker whose OpenFor has passed still reads Open until
// a call through it probes.
func (b *Breaker) State() State { return State(b.state.Load()) }

// Healthy reports whether the breaker is closed: Redis answered the last
// calls.
func (b *Breaker) Healthy() bool { return b.State() == Closed }

// Changes counts the breaker's state transitions since it was made.
func (b *Breaker) Changes() uint64 { return b.changes.Load() }

// OpenFor returns how long the breaker stays open before probing.
func (b *Breaker) OpenFor() time.Duration { return b.settings.OpenFor }

// Timeout returns the default timeout of a call.
func (b *Breaker) Timeout() time.Duration { return b.settings.Timeout }

// ProbeIn returns how long until an open breaker lets its next probe
// through: zero when it is not open.
//
// The breaker's time is the system clock, not the limiter's (clock.Clock):
// gobreaker times the open state with time.Now, and the probe comes when
// its clock says. A wait told against another clock (a manual one in a
// test, say) would tell nothing of when the probe comes.
func (b *Breaker) ProbeIn() time.Duration {
	if b.State() != Open {
		return 0
	}
	return max(time.Duration(b.openedAt.Load()+int64(b.settings.OpenFor)-time.Now().UnixNano()), 0)
}

// Counts is a snapshot of what the breaker has seen.
type Counts struct {
	Successes, Failures uint64 // calls Redis completed, and calls that failed
	Timeouts            uint64 // calls abandoned at their timeout (also failures)
	Rejected            uint64 // calls not made: open, or too many in flight
	Excluded            uint64 // calls counted neither way: cut short by their caller, or excluded by IsExcluded
	Probes              uint64 // calls let through while half-open
	Changes             uint64 // state transitions
}

// Counts returns the breaker's counters.
func (b *Breaker) Counts() Counts {
	return Counts{
		Successes: b.successes.Load(), Failures: b.failures.Load(),
		Timeouts: b.timeouts.Load(), Rejected: b.rejected.Load(), Excluded: b.excluded.Load(),
		Probes: b.probes.Load(), Changes: b.changes.Load(),
	}
}

// errOwnTimeout is the cause of a call's context ending at the breaker's own
// timeout, as opposed to the caller's deadline.
var errOwnTimeout = errors.New("breaker: own timeout")

// errCallerGone is reported to gobreaker for a call its caller cut short:
// excluded, whatever IsExcluded says.
var errCallerGone = errors.New("breaker: the caller's context ended")

// Admitted returns the state in which the breaker let through the call whose
// context ctx is (Closed, or HalfOpen for a probe), and false for a context
// that did not come from Call.
func Admitted(ctx context.Context) (State, bool) {
	st, ok := ctx.Value(admittedKey{}).(State)
	return st, ok
}

type admittedKey struct{}

// callerGone reports whether a call on cctx (made from ctx) ended because
// the caller's context ended first: canceled, or its deadline passed
// before the breaker's own timeout.
func callerGone(ctx, cctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(context.Cause(cctx), errOwnTimeout)
}

// Call runs fn through b with timeout (zero means b's Timeout). fn gets a
// context that ends at the timeout or with ctx, and tells Admitted which
// state let it through. When the breaker is open Call returns ErrOpen
// without calling fn; when fn has not returned by the timeout Call returns
// ErrTimeout at once, counts a failure, and leaves fn to finish on its own
// goroutine (unless the breaker runs calls inline). Otherwise it returns
// what fn returned, after counting it.
//
// A call whose ctx is already done is not made: Call returns ctx's error. A
// call cut short by ctx (canceled, or its deadline before the timeout)
// returns ctx's error and is counted neither as a success nor as a failure:
// the caller's deadline says nothing about Redis.
func Call[T any](ctx context.Context, b *Breaker, timeout time.Duration, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		b.excluded.Add(1)
		return zero, err
	}
	if timeout <= 0 {
		timeout = b.settings.Timeout
	}
	done, st, err := b.allow()
	if err != nil {
		b.rejected.Add(1)
		return zero, fmt.Errorf("%w: %s", ErrOpen, b.settings.Name)
	}
	if st == HalfOpen {
		b.probes.Add(1)
	}
	select {
	case b.inFlight <- struct{}{}:
	default:
		b.rejected.Add(1)
		b.failures.Add(1)
		b.finish(done, ErrBusy)
		return zero, ErrBusy
	}
	cctx, cancel := context.WithTimeoutCause(context.WithValue(ctx, admittedKey{}, st), timeout, errOwnTimeout)
	if b.settings.Inline {
		v, err := fn(cctx)
		<-b.inFlight
		if err != nil && callerGone(ctx, cctx) {
			cancel()
			b.excluded.Add(1)
			b.finish(done, errCallerGone)
			return v, ctx.Err()
		}
		b.count(done, err, cctx)
		cancel()
		return v, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn(cctx)
		<-b.inFlight
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil && callerGone(ctx, cctx) {
			cancel()
			b.excluded.Add(1)
			b.finish(done, errCallerGone)
			return zero, ctx.Err()
		}
		b.count(done, r.err, cctx)
		cancel()
		return r.v, r.err
	case <-cctx.Done():
		if callerGone(ctx, cctx) {
			cancel()
			b.excluded.Add(1)
			b.finish(done, errCallerGone) // the caller gave up: not Redis's doing
			return zero, ctx.Err()
		}
		cancel()
		b.timeouts.Add(1)
		b.failures.Add(1)
		b.finish(done, ErrTimeout)
		return zero, ErrTimeout
	}
}

// count reports a finished call's outcome to gobreaker and the counters.
func (b *Breaker) count(done func(error), err error, ctx context.Context) {
	switch {
	case b.settings.IsExcluded != nil && err != nil && b.settings.IsExcluded(err):
		b.excluded.Add(1)
	case err == nil || (b.settings.IsSuccessful != nil && b.settings.IsSuccessful(err)):
		b.successes.Add(1)
	default:
		b.failures.Add(1)
		if ctx.Err() != nil {
			b.timeouts.Add(1)
		}
	}
	b.finish(done, err)
}
