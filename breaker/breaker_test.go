package breaker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	bg      = context.Background()
	errBoom = errors.New("boom")
)

func ok(context.Context) (int, error)   { return 1, nil }
func fail(context.Context) (int, error) { return 0, errBoom }

func TestOpensAfterConsecutiveFailuresAndProbesBack(t *testing.T) {
	var transitions []string
	var mu sync.Mutex
	// Open for long enough that no stall of the machine's lets the call
	// after the opening through as a probe; the test then waits it out.
	const openFor = 500 * time.Millisecond
	b := New(Settings{Name: "t", Failures: 3, OpenFor: openFor, OnStateChange: func(from, to State) {
		mu.Lock()
		transitions = append(transitions, from.String()+">"+to.String())
		mu.Unlock()
	}})
	assert.Equal(t, Closed, b.State())
	for range 2 {
		_, err := Call(bg, b, 0, fail)
		assert.ErrorIs(t, err, errBoom)
	}
	assert.True(t, b.Healthy(), "two failures are not enough")
	_, _ = Call(bg, b, 0, ok) // a success resets the count
	for range 3 {
		_, _ = Call(bg, b, 0, fail)
	}
	assert.Equal(t, Open, b.State())
	assert.Positive(t, b.ProbeIn())

	called := false
	_, err := Call(bg, b, 0, func(context.Context) (int, error) { called = true; return 0, nil })
	assert.ErrorIs(t, err, ErrOpen)
	assert.False(t, called, "an open breaker calls nothing")

	time.Sleep(b.ProbeIn() + 10*time.Millisecond)
	v, err := Call(bg, b, 0, ok) // the probe
	require.NoError(t, err)
	assert.Equal(t, 1, v)
	assert.Equal(t, Closed, b.State())
	assert.Zero(t, b.ProbeIn())

	mu.Lock()
	assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, transitions)
	mu.Unlock()
	assert.Equal(t, uint64(3), b.Changes())
	c := b.Counts()
	assert.Equal(t, uint64(2), c.Successes)
	assert.Equal(t, uint64(5), c.Failures)
	assert.Equal(t, uint64(1), c.Rejected)
}

func TestFailedProbeReopens(t *testing.T) {
	b := New(Settings{Failures: 1, OpenFor: 20 * time.Millisecond})
	_, _ = Call(bg, b, 0, fail)
	require.Equal(t, Open, b.State())
	time.Sleep(30 * time.Millisecond)
	_, err := Call(bg, b, 0, fail)
	assert.ErrorIs(t, err, errBoom)
	assert.Equal(t, Open, b.State())
}

// TestTimeoutDoesNotWaitForTheCall: a call that ignores its context (as a
// go-redis client without ContextTimeoutEnabled does) is abandoned at the
// timeout; the caller waits no longer.
func TestTimeoutDoesNotWaitForTheCall(t *testing.T) {
	b := New(Settings{Timeout: 20 * time.Millisecond, Failures: 1})
	release := make(chan struct{})
	finished := make(chan struct{})
	_, err := Call(bg, b, 0, func(context.Context) (int, error) {
		defer close(finished)
		<-release // deaf to the context: it returns only once released, after Call
		return 1, nil
	})
	assert.ErrorIs(t, err, ErrTimeout)
	select {
	case <-finished:
		t.Fatal("Call returned only once the call finished")
	default: // returned at the timeout, while the call still runs
	}
	assert.Equal(t, Open, b.State(), "a timeout is a failure")
	assert.Equal(t, uint64(1), b.Counts().Timeouts)
	close(release)
	<-finished
}

func TestInlineCallsHonourTheContext(t *testing.T) {
	b := New(Settings{Timeout: 20 * time.Millisecond, Failures: 1, Inline: true})
	_, err := Call(bg, b, 0, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, Open, b.State())
	assert.Equal(t, uint64(1), b.Counts().Timeouts)
}

func TestPerCallTimeoutOverridesTheDefault(t *testing.T) {
	b := New(Settings{Timeout: 10 * time.Millisecond})
	// The call outlasts the default timeout for sure; the one given, only a
	// machine stalled ten seconds could make it outlast.
	v, err := Call(bg, b, 10*time.Second, func(context.Context) (int, error) {
		time.Sleep(30 * time.Millisecond)
		return 7, nil
	})
	require.NoError(t, err)
	assert.Equal(t, 7, v)
}

func TestTooManyInFlight(t *testing.T) {
	b := New(Settings{Timeout: time.Second, MaxInFlight: 2, Failures: 100})
	release := make(chan struct{})
	var started sync.WaitGroup
	var wg sync.WaitGroup
	for range 2 {
		started.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = Call(bg, b, 0, func(context.Context) (int, error) { started.Done(); <-release; return 0, nil })
		}()
	}
	started.Wait()
	_, err := Call(bg, b, 0, ok)
	assert.ErrorIs(t, err, ErrBusy)
	close(release)
	wg.Wait()
	_, err = Call(bg, b, 0, ok)
	assert.NoError(t, err, "room again once the calls return")
}

func TestSuccessfulAndExcludedErrors(t *testing.T) {
	errCaller := errors.New("caller's mistake")
	b := New(Settings{
		Failures:     1,
		IsSuccessful: func(err error) bool { return errors.Is(err, errCaller) },
		IsExcluded:   func(err error) bool { return errors.Is(err, context.Canceled) },
	})
	_, err := Call(bg, b, 0, func(context.Context) (int, error) { return 0, errCaller })
	assert.ErrorIs(t, err, errCaller)
	assert.True(t, b.Healthy(), "the caller's mistake is not Redis's failure")

	ctx, cancel := context.WithCancel(bg)
	_, err = Call(ctx, b, 0, func(ctx context.Context) (int, error) { cancel(); <-ctx.Done(); return 0, ctx.Err() })
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, b.Healthy(), "the caller giving up says nothing about Redis")

	_, err = Call(bg, b, 0, func(context.Context) (int, error) { return 0, context.Canceled })
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, b.Healthy(), "IsExcluded's errors are not counted")
	assert.Equal(t, uint64(2), b.Counts().Excluded)
}

func TestConcurrentCalls(t *testing.T) {
	b := New(Settings{Failures: 1000, OpenFor: 10 * time.Millisecond})
	var n atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				f := ok
				if (g+i)%3 == 0 {
					f = fail
				}
				if _, err := Call(bg, b, 0, f); err == nil {
					n.Add(1)
				}
				_ = b.State()
			}
		}()
	}
	wg.Wait()
	assert.Positive(t, n.Load())
}

func TestStateString(t *testing.T) {
	assert.Equal(t, "closed", Closed.String())
	assert.Equal(t, "half-open", HalfOpen.String())
	assert.Equal(t, "open", Open.String())
	assert.Equal(t, "state(9)", State(9).String())
}

// A caller's own deadline or cancellation says nothing about Redis: three
// calls whose contexts had already expired, or expired during the call
// before the breaker's own timeout, leave it closed, in either call mode.
func TestCallerDeadlineIsNotAFailure(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutine", true: "inline"}[inline], func(t *testing.T) {
			b := New(Settings{Failures: 3, Timeout: time.Second, Inline: inline})
			expired, cancel := context.WithDeadline(bg, time.Now().Add(-time.Second))
			defer cancel()
			called := 0
			for range 3 {
				_, err := Call(expired, b, 0, func(ctx context.Context) (int, error) { called++; <-ctx.Done(); return 0, ctx.Err() })
				assert.ErrorIs(t, err, context.DeadlineExceeded)
			}
			assert.Zero(t, called, "an expired context makes no call")
			for range 3 {
				short, cancel := context.WithTimeout(bg, 5*time.Millisecond)
				_, err := Call(short, b, 0, func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
				cancel()
				assert.ErrorIs(t, err, context.DeadlineExceeded)
			}
			assert.Equal(t, Closed, b.State(), "the callers' deadlines did not open the breaker")
			c := b.Counts()
			assert.Zero(t, c.Failures)
			assert.Equal(t, uint64(6), c.Excluded)

			// The breaker's own timeout is still a failure.
			for range 3 {
				_, err := Call(bg, b, 5*time.Millisecond, func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
				assert.Error(t, err)
			}
			assert.Equal(t, Open, b.State())
			assert.Equal(t, uint64(3), b.Counts().Timeouts)
		})
	}
}

// Every transition reaches OnTransition once, in order, with the failure
// that opened the breaker, and outside gobreaker's lock: the callback may
// call the breaker.
func TestTransitionsAreToldWithTheirCause(t *testing.T) {
	var got []Transition
	var b *Breaker
	b = New(Settings{Failures: 2, OpenFor: 20 * time.Millisecond, OnTransition: func(tr Transition) {
		_ = b.Counts() // calling back in does not deadlock
		_, _ = Call(bg, b, 0, ok)
		got = append(got, tr)
	}})
	errLast := errors.New("the second failure")
	_, _ = Call(bg, b, 0, fail)
	_, _ = Call(bg, b, 0, func(context.Context) (int, error) { return 0, errLast })
	require.Len(t, got, 1)
	assert.Equal(t, Transition{From: Closed, To: Open, Cause: errLast, At: got[0].At}, got[0])
	assert.False(t, got[0].At.IsZero())

	time.Sleep(30 * time.Millisecond)                                                  // gobreaker reads the real clock
	_, err := Call(bg, b, 0, func(context.Context) (int, error) { return 0, errBoom }) // a failed probe
	assert.ErrorIs(t, err, errBoom)
	time.Sleep(30 * time.Millisecond)
	_, err = Call(bg, b, 0, ok)
	require.NoError(t, err)
	var path []string
	for _, tr := range got {
		path = append(path, tr.From.String()+">"+tr.To.String())
	}
	assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}, path)
	assert.ErrorIs(t, got[2].Cause, errBoom, "a failed probe is the reopening's cause")
	assert.Nil(t, got[4].Cause)
	assert.Equal(t, uint64(2), b.Counts().Probes)
}

// Concurrent callers hand out every transition exactly once, in order.
func TestTransitionsAreToldOnceUnderConcurrency(t *testing.T) {
	var mu sync.Mutex
	var told []Transition
	b := New(Settings{Failures: 1, OpenFor: time.Millisecond, OnTransition: func(tr Transition) {
		mu.Lock()
		told = append(told, tr)
		mu.Unlock()
	}})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				f := ok
				if (g+i)%2 == 0 {
					f = fail
				}
				_, _ = Call(bg, b, 0, f)
			}
		}()
	}
	wg.Wait()
	_, _ = Call(bg, b, 0, ok) // hands out anything left
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, int(b.Changes()), len(told), "each transition told once")
	for i := 1; i < len(told); i++ {
		require.Equal(t, told[i-1].To, told[i].From, "transition %d follows the one before", i)
	}
}

// Admitted tells the called function which state let it through: Closed,
// or HalfOpen for a probe.
func TestAdmittedState(t *testing.T) {
	b := New(Settings{Failures: 1, OpenFor: 10 * time.Millisecond})
	state := func(ctx context.Context) (State, error) {
		st, ok := Admitted(ctx)
		require.True(t, ok)
		return st, nil
	}
	st, err := Call(bg, b, 0, state)
	require.NoError(t, err)
	assert.Equal(t, Closed, st)
	_, _ = Call(bg, b, 0, fail)
	time.Sleep(20 * time.Millisecond)
	st, err = Call(bg, b, 0, state)
	require.NoError(t, err)
	assert.Equal(t, HalfOpen, st)
	_, ok := Admitted(bg)
	assert.False(t, ok)
}
