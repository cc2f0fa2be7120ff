// Package rateparity runs one sequence of Allow, Reserve and Cancel against
// golang.org/x/time/rate and against a limiter of ours, and reports every
// step where their outcomes differ: the parity tests of the token bucket's
// and the leaky bucket's reservations.
//
// The reference is told the instants our limiter decided at, so a limiter
// whose time is Redis server TIME is compared as exactly as one on a manual
// clock. x/time/rate counts tokens in floats: delays are compared to within
// Tolerance, and token counts to within a millionth.
package rateparity

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"golang.org/x/time/rate"
)

// Kind is what a step does.
type Kind int

// The kinds of step.
const (
	Allow   Kind = iota // AllowN
	Reserve             // ReserveN
	Cancel              // cancel an earlier reservation
)

func (k Kind) String() string { return [...]string{"allow", "reserve", "cancel"}[k] }

// Op is one step of a sequence.
type Op struct {
	Kind Kind
	// Wait is how long the subject's clock moves before the step.
	Wait time.Duration
	// N is the weight of an Allow or Reserve.
	N int
	// Target is, for Cancel, the index of the Reserve step it cancels.
	Target int
}

// Options shape a sequence.
type Options struct {
	Steps   int           // how many steps
	MaxN    int           // the heaviest request, at least 1
	Grid    time.Duration // every Wait is a multiple of it
	MaxWait int           // the longest Wait, in Grids
}

// Ops returns a sequence drawn from seed: about 40% reservations, 35%
// allows and 25% cancels of an earlier reservation, each cancelled at most
// once.
func Ops(seed uint64, o Options) []Op {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var ops []Op
	var open []int // reservations not yet cancelled
	for len(ops) < o.Steps {
		op := Op{Wait: time.Duration(rng.IntN(o.MaxWait+1)) * o.Grid, N: 1 + rng.IntN(max(o.MaxN, 1))}
		switch p := rng.IntN(100); {
		case p < 40:
			op.Kind = Reserve
			open = append(open, len(ops))
		case p < 75 || len(open) == 0:
			op.Kind = Allow
		default:
			op.Kind = Cancel
			i := rng.IntN(len(open))
			op.Target = open[i]
			open = append(open[:i], open[i+1:]...)
		}
		ops = append(ops, op)
	}
	return ops
}

// Outcome is what our limiter answered to one Allow or Reserve.
type Outcome struct {
	OK        bool          // admitted (Allow) or made (Reserve)
	Delay     time.Duration // Reserve: how long to wait
	Remaining int64         // tokens left after it; -1: do not compare
	At        time.Time     // the instant it was decided at
}

// Subject is a limiter of ours under test, deciding on one key.
type Subject interface {
	// Advance moves the subject's clock by d; a subject on a clock it
	// cannot move (Redis TIME) ignores it.
	Advance(d time.Duration)
	Allow(n int) (Outcome, error)
	// Reserve returns the outcome and a function that cancels the
	// reservation and returns the instant it was cancelled at.
	Reserve(n int) (Outcome, func() (time.Time, error), error)
}

// Mismatch is one step where the two answered differently.
type Mismatch struct {
	Step int
	Op   Op
	What string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("step %d (%v n=%d wait=%v target=%d): %s", m.Step, m.Op.Kind, m.Op.N, m.Op.Wait, m.Op.Target, m.What)
}

// Tolerance is how far apart two delays may be: x/time/rate rounds its
// float token counts.
const Tolerance = time.Microsecond

// Run plays ops on sub and on ref, a fresh x/time/rate limiter of the same
// rate and burst, and returns the steps where they differ, and an error if
// sub failed. When maxDebt is set, a Reserve that the reference would make
// wait longer than its burst's worth of tokens is played as an Allow, for
// subjects that refuse such waits (a limiter deciding in memory while a
// Redis mode runs).
func Run(ops []Op, ref *rate.Limiter, sub Subject, maxDebt bool) ([]Mismatch, error) {
	type held struct {
		res    *rate.Reservation
		cancel func() (time.Time, error)
	}
	reservations := map[int]held{}
	var out []Mismatch
	var last time.Time
	for i, op := range ops {
		sub.Advance(op.Wait)
		bad := func(format string, args ...any) {
			out = append(out, Mismatch{Step: i, Op: op, What: fmt.Sprintf(format, args...)})
		}
		kind := op.Kind
		if kind == Reserve && maxDebt && !last.IsZero() {
			if ref.TokensAt(last.Add(op.Wait)) < float64(op.N-ref.Burst())+1e-6 {
				kind = Allow
			}
		}
		switch kind {
		case Allow:
			got, err := sub.Allow(op.N)
			if err != nil {
				return out, fmt.Errorf("step %d: %w", i, err)
			}
			last = got.At
			if want := ref.AllowN(got.At, op.N); want != got.OK {
				bad("allowed %v, x/time/rate %v", got.OK, want)
			}
			compareTokens(ref, got, bad)
		case Reserve:
			got, cancel, err := sub.Reserve(op.N)
			if err != nil {
				return out, fmt.Errorf("step %d: %w", i, err)
			}
			last = got.At
			want := ref.ReserveN(got.At, op.N)
			if want.OK() != got.OK {
				bad("reserved %v, x/time/rate %v", got.OK, want.OK())
			}
			if got.OK && want.OK() {
				if d := want.DelayFrom(got.At) - got.Delay; d > Tolerance || d < -Tolerance {
					bad("delay %v, x/time/rate %v", got.Delay, want.DelayFrom(got.At))
				}
				reservations[i] = held{want, cancel}
			}
			compareTokens(ref, got, bad)
		case Cancel:
			h, ok := reservations[op.Target]
			if !ok {
				continue // the target was played as an Allow, or not made
			}
			at, err := h.cancel()
			if err != nil {
				return out, fmt.Errorf("step %d: %w", i, err)
			}
			last = at
			h.res.CancelAt(at)
		}
	}
	return out, nil
}

// compareTokens checks the tokens our limiter reports against the
// reference's at the same instant.
func compareTokens(ref *rate.Limiter, got Outcome, bad func(string, ...any)) {
	if got.Remaining < 0 {
		return
	}
	tokens := ref.TokensAt(got.At)
	want := int64(math.Max(math.Floor(tokens+1e-6), 0))
	if got.Remaining != want {
		bad("remaining %d, x/time/rate %d (%.9f tokens)", got.Remaining, want, tokens)
	}
}
