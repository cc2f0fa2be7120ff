package local

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit/internal/rateparity"
	"github.com/hybridlimit/hybridlimit/limit"
)

// engineSubject plays a parity sequence on one key of an Engine, at
// instants it walks itself.
type engineSubject struct {
	e       *Engine
	lim     limit.Limit
	now     int64
	maxWait time.Duration
	queue   bool // the leaky bucket: compare no token counts
}

func (s *engineSubject) Advance(d time.Duration) { s.now += int64(d) }

func (s *engineSubject) Allow(n int) (rateparity.Outcome, error) {
	res, err := s.e.AllowN(s.now, "k", s.lim, int64(n))
	return s.outcome(res.Allowed, 0, res.Remaining), err
}

func (s *engineSubject) Reserve(n int) (rateparity.Outcome, func() (time.Time, error), error) {
	r, err := s.e.ReserveN(s.now, "k", s.lim, int64(n), s.maxWait)
	act := r.At + int64(r.Delay)
	cancel := func() (time.Time, error) {
		_, err := s.e.CancelN(s.now, "k", s.lim, int64(n), act)
		return time.Unix(0, s.now), err
	}
	return s.outcome(r.Allowed, r.Delay, r.Remaining), cancel, err
}

func (s *engineSubject) outcome(ok bool, delay time.Duration, remaining int64) rateparity.Outcome {
	if s.queue {
		remaining = -1
	}
	return rateparity.Outcome{OK: ok, Delay: delay, Remaining: remaining, At: time.Unix(0, s.now)}
}

// The token bucket's Allow, Reserve and Cancel answer as x/time/rate's do,
// step for step, over seeded random sequences. The rate is 8 per second and
// every instant falls on a 1/64 s grid, so that x/time/rate's floats are
// exact and the comparison is too.
func TestTokenBucketParity(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			lim := limit.PerSecond(8).WithBurst(4)
			ops := rateparity.Ops(seed, rateparity.Options{Steps: 300, MaxN: 4, Grid: time.Second / 64, MaxWait: 24})
			sub := &engineSubject{e: newEngine(t, Config{}), lim: lim, now: t0, maxWait: limit.MaxSpan}
			bad, err := rateparity.Run(ops, rate.NewLimiter(8, 4), sub, false)
			require.NoError(t, err)
			assert.Empty(t, bad)
		})
	}
}

// The leaky bucket's queue answers as x/time/rate's limiter of burst 1 does
// (one request per interval, each waiting for the one before), as long as
// its queue has room: cancelling returns only what no later reservation
// counts on.
func TestLeakyBucketParity(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			lim := limit.PerSecond(8).WithBurst(1000).WithAlgorithm(limit.LeakyBucket)
			ops := rateparity.Ops(seed, rateparity.Options{Steps: 300, MaxN: 1, Grid: time.Second / 64, MaxWait: 12})
			sub := &engineSubject{e: newEngine(t, Config{}), lim: lim, now: t0, maxWait: limit.MaxSpan, queue: true}
			bad, err := rateparity.Run(ops, rate.NewLimiter(8, 1), sub, false)
			require.NoError(t, err)
			assert.Empty(t, bad)
		})
	}
}

// At 1 per 100 ms: reserve a, b and c, cancel b, then reserve d. c and d
// must not share a slot: d goes after c, at 300 ms, as x/time/rate puts it.
func TestLeakyCancelDoesNotDoubleBook(t *testing.T) {
	ms := time.Millisecond
	lim := limit.PerSecond(10).WithBurst(10).WithAlgorithm(limit.LeakyBucket)
	e := newEngine(t, Config{})
	var rs []limit.Reservation
	for range 3 {
		r, err := e.ReserveN(t0, "q", lim, 1, time.Hour)
		require.NoError(t, err)
		rs = append(rs, r)
	}
	assert.Equal(t, []time.Duration{0, 100 * ms, 200 * ms}, []time.Duration{rs[0].Delay, rs[1].Delay, rs[2].Delay})
	gave, err := e.CancelN(t0, "q", lim, 1, rs[1].At+int64(rs[1].Delay))
	require.NoError(t, err)
	assert.False(t, gave, "c is queued behind b: nothing can be given back")
	d, err := e.ReserveN(t0, "q", lim, 1, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, 300*ms, d.Delay)

	ref := rate.NewLimiter(10, 1)
	at := time.Unix(0, t0)
	a, b, c := ref.ReserveN(at, 1), ref.ReserveN(at, 1), ref.ReserveN(at, 1)
	b.CancelAt(at)
	assert.Equal(t, 300*ms, ref.ReserveN(at, 1).DelayFrom(at), "x/time/rate agrees")
	_, _ = a, c
}

// Worked cases of the cancellation rule, on the token bucket of burst 3,
// one token per 100 ms.
func TestTokenCancel(t *testing.T) {
	ms := time.Millisecond
	lim := limit.PerSecond(10).WithBurst(3)
	reserve := func(e *Engine, at time.Duration, n int64) limit.Reservation {
		r, err := e.ReserveN(t0+int64(at), "k", lim, n, time.Hour)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		return r
	}
	cancel := func(e *Engine, at time.Duration, r limit.Reservation, n int64) bool {
		gave, err := e.CancelN(t0+int64(at), "k", lim, n, r.At+int64(r.Delay))
		require.NoError(t, err)
		return gave
	}
	t.Run("a reservation acting at once, cancelled at once, is given back", func(t *testing.T) {
		e := newEngine(t, Config{})
		reserve(e, 0, 2)
		r := reserve(e, 0, 1)
		assert.True(t, cancel(e, 0, r, 1))
		next := reserve(e, 0, 2)
		assert.Equal(t, 100*ms, next.Delay, "one token was given back: 2 of 3 used, then 2 more")
	})
	t.Run("once it could act, nothing is given back", func(t *testing.T) {
		e := newEngine(t, Config{})
		reserve(e, 0, 3)
		r := reserve(e, 0, 1) // acts at 100 ms
		assert.False(t, cancel(e, 150*ms, r, 1))
	})
	t.Run("a later reservation keeps what it counts on", func(t *testing.T) {
		e := newEngine(t, Config{})
		reserve(e, 0, 3)
		b := reserve(e, 0, 2) // acts at 200 ms
		c := reserve(e, 0, 1) // acts at 300 ms
		assert.True(t, cancel(e, 0, b, 2), "c counts on 100 ms of b's 200")
		next := reserve(e, 0, 1)
		assert.Equal(t, 300*ms, next.Delay, "one of b's tokens came back: next acts with c, not after it")
		assert.Equal(t, 300*ms, c.Delay)
	})
	t.Run("an allow moves the latest act, as x/time/rate's lastEvent", func(t *testing.T) {
		// x/time/rate: burst 10, 10 per second; reserve 10 and then 1 (at
		// 100 ms), cancel the 10 (9 back: the 1 counts on 100 ms), allow 1,
		// which makes now the latest act, then cancel the 1: it gives back
		// 2, since nothing acts after it any more: 10 - 11 + 9 - 1 + 2 = 9.
		lim := limit.PerSecond(10).WithBurst(10)
		ref := rate.NewLimiter(10, 10)
		at := time.Unix(0, t0)
		e := newEngine(t, Config{})
		q, _ := e.ReserveN(t0, "k", lim, 10, time.Hour)
		rq := ref.ReserveN(at, 10)
		r, _ := e.ReserveN(t0, "k", lim, 1, time.Hour)
		rr := ref.ReserveN(at, 1)
		_, _ = e.CancelN(t0, "k", lim, 10, q.At+int64(q.Delay))
		rq.CancelAt(at)
		res, _ := e.AllowN(t0, "k", lim, 1)
		require.True(t, res.Allowed)
		require.True(t, ref.AllowN(at, 1))
		_, _ = e.CancelN(t0, "k", lim, 1, r.At+int64(r.Delay))
		rr.CancelAt(at)
		res, _ = e.AllowN(t0, "k", lim, 0)
		assert.Equal(t, int64(ref.TokensAt(at)), res.Remaining)
		assert.Equal(t, int64(9), res.Remaining, "8 after the first cancel and the allow, 2 more back after the second: 1 was its own")
	})
	t.Run("another limit gives back nothing", func(t *testing.T) {
		e := newEngine(t, Config{})
		r := reserve(e, 0, 3)
		gave, err := e.CancelN(t0, "k", limit.PerSecond(20), 3, r.At)
		require.NoError(t, err)
		assert.False(t, gave)
		gave, err = e.CancelN(t0, "other", lim, 3, r.At)
		require.NoError(t, err)
		assert.False(t, gave)
	})
	t.Run("a wait beyond maxWait is refused and spends nothing", func(t *testing.T) {
		e := newEngine(t, Config{})
		reserve(e, 0, 3)
		r, err := e.ReserveN(t0, "k", lim, 2, 150*ms)
		require.NoError(t, err)
		assert.False(t, r.Allowed)
		assert.Equal(t, 50*ms, r.RetryAfter, "it would wait 200 ms, 50 ms more than allowed")
		r = reserve(e, 0, 1)
		assert.Equal(t, 100*ms, r.Delay)
	})
}
