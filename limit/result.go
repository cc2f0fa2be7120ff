package limit

import "time"

// Result is the outcome of one decision: everything a caller needs to answer
// the request and write rate-limit headers. A limit reached is a Result with
// Allowed false, never an error.
type Result struct {
	// Limit is the limit the decision was made against.
	Limit Limit
	// Allowed reports whether the request was admitted (and its n spent).
	Allowed bool
	// Remaining is how many more requests of weight 1 would be admitted right
	// now, after this decision. Never negative.
	Remaining int64
	// RetryAfter is how long until the same request would be admitted, if no
	// one else spends in the meantime. Zero when Allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its fresh state (a full
	// bucket, an empty window) if no one spends in the meantime.
	ResetAfter time.Duration
}

// Reservation is the outcome of a Reserve on a bucket: on the token bucket,
// a request admitted now or later, as golang.org/x/time/rate's ReserveN
// gives; on the leaky bucket, a place in its queue. Allowed reports whether
// the reservation was made (x/time/rate's OK); when it was not, RetryAfter
// says when it would be.
type Reservation struct {
	Result
	// Delay is how long the admitted request must wait, from At, before it
	// proceeds. Zero when it may proceed at once or when it was not
	// admitted.
	Delay time.Duration
	// At is when the reservation was decided, in Unix ns on the deciding
	// clock: the request may act at At + Delay. Cancelling the
	// reservation needs it.
	At int64
}

// State is the raw state of one key under one algorithm, in the units the
// local engine and the Redis scripts share, so a node can seed its memory from
// the state Redis holds. Times are Unix nanoseconds on the Redis clock.
type State struct {
	// TAT is the GCRA theoretical arrival time of the buckets. It may run
	// ahead of now by the burst tolerance, and by one more tolerance of debt
	// when the fleet over-admitted.
	TAT int64
	// Window is the index of the current window (Unix time / Period) of the
	// window algorithms.
	Window int64
	// Count is the number of requests counted in Window.
	Count int64
	// Prev is the number counted in Window-1 (sliding window counter only).
	Prev int64
}
