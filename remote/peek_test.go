package remote

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// peekLimits are every algorithm and both kinds of calendar window, slow
// enough (an hour, a day) that the microseconds between a peek and the
// decision after it refill nothing and end no window.
func peekLimits() []limit.Limit {
	return []limit.Limit{
		limit.PerHour(6).WithBurst(4),
		limit.PerHour(6).WithBurst(3).WithAlgorithm(limit.LeakyBucket),
		limit.PerHour(6).WithAlgorithm(limit.FixedWindow),
		limit.PerHour(6).WithAlgorithm(limit.SlidingWindowLog),
		limit.PerHour(6).WithAlgorithm(limit.SlidingWindowCounter),
		limit.PerCalendar(6, limit.Day, "Europe/Paris"),
		limit.PerCalendar(6, limit.Week, "").WithAlgorithm(limit.SlidingWindowCounter),
	}
}

// sameDecision checks that a peek p says what the decision d made after it
// said, the time between them (Redis's own, from each answer) accounted
// for: a wait the peek gave is at the decision as long, or shorter by at
// most that time.
func sameDecision(t *testing.T, p, d Decision, msg string) {
	t.Helper()
	shift := time.Duration(d.Now - p.Now)
	require.GreaterOrEqual(t, shift, time.Duration(0), msg)
	require.Equal(t, d.Allowed, p.Allowed, msg)
	require.Equal(t, d.Remaining, p.Remaining, msg)
	require.Equal(t, d.Limit, p.Limit, msg)
	require.Equal(t, d.Lost, p.Lost, msg)
	require.LessOrEqual(t, d.RetryAfter, p.RetryAfter, "%s: retry after", msg)
	require.GreaterOrEqual(t, d.RetryAfter, p.RetryAfter-shift, "%s: retry after (%v apart)", msg, shift)
	require.LessOrEqual(t, d.ResetAfter, p.ResetAfter, "%s: reset after", msg)
	require.GreaterOrEqual(t, d.ResetAfter, p.ResetAfter-shift, "%s: reset after (%v apart)", msg, shift)
}

// A peek on Redis says what the decision after it decides, on every
// algorithm: keys fresh, spent, full, and weights up to the capacity.
func TestPeekIsWhatAllowAnswers(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Client(t))
	for _, lim := range peekLimits() {
		t.Run(lim.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, uint64(lim.Algorithm)))
			refused := 0
			for i := range 40 {
				key := fmt.Sprintf("%v:k%d", lim.Algorithm, r.IntN(3))
				n := r.Int64N(min(lim.Capacity(), 3) + 1)
				p, err := s.PeekN(bg, key, lim, n, Known{})
				require.NoError(t, err)
				d, err := s.AllowN(bg, key, lim, n)
				require.NoError(t, err)
				sameDecision(t, p, d, fmt.Sprintf("step %d: %s n %d", i, key, n))
				if !d.Allowed {
					refused++
				}
			}
			assert.Positive(t, refused, "the sequence reaches refusals")
		})
	}
}

// A key whose state Redis lost while the node's estimate says it spent is
// peeked at as the decision will restore it, from the estimate; the peek
// restores nothing itself.
func TestPeekAtALostKeyReadsTheEstimate(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := newStore(t, c)
	for _, lim := range []limit.Limit{
		limit.PerHour(6).WithBurst(4),
		limit.PerHour(6).WithAlgorithm(limit.FixedWindow),
		limit.PerHour(6).WithAlgorithm(limit.SlidingWindowCounter),
	} {
		t.Run(lim.String(), func(t *testing.T) {
			key := "lost:" + lim.Algorithm.String()
			d, err := s.AllowN(bg, key, lim, 3)
			require.NoError(t, err)
			k := Known{Estimate: d.State, Now: d.Now}
			require.NoError(t, c.Del(bg, redisKey(s.prefix, lim, key)).Err())
			p, err := s.PeekN(bg, key, lim, 1, k)
			require.NoError(t, err)
			assert.True(t, p.Lost)
			assert.Equal(t, int64(0), c.Exists(bg, redisKey(s.prefix, lim, key)).Val(), "the peek restored nothing")
			got, err := s.AllowNKnown(bg, key, lim, 1, k)
			require.NoError(t, err)
			sameDecision(t, p, got, "after the loss")
			assert.Equal(t, lim.Capacity()-4, p.Remaining, "3 spent before, 1 more now")
		})
	}
}

// Peeks write nothing: Redis's count of changes stays where it was, and
// every key holds what it held, across peeks of every algorithm on keys
// fresh, spent and lost (with an estimate that the decision would restore).
func TestPeekWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := newStore(t, c)
	require.NoError(t, s.Ping(bg))
	for _, lim := range peekLimits() {
		_, err := s.AllowN(bg, "spent", lim, lim.Capacity())
		require.NoError(t, err)
		_, err = s.AllowN(bg, "some", lim, 1)
		require.NoError(t, err)
	}
	before, keys := redistest.Writes(t, c), redistest.Dump(t, c)
	require.NotEmpty(t, keys)
	peeks := 0
	for range 5 {
		for _, lim := range peekLimits() {
			for _, key := range []string{"spent", "some", "fresh"} {
				for n := range int64(3) {
					_, err := s.PeekN(bg, key, lim, n, Known{})
					require.NoError(t, err)
					k := Known{Estimate: limit.State{TAT: time.Now().Add(time.Hour).UnixNano(), Window: 1 << 40, Count: 3}, Now: time.Now().UnixNano()}
					_, err = s.PeekN(bg, key, lim, n, k)
					require.NoError(t, err)
					peeks += 2
				}
			}
		}
	}
	assert.Equal(t, before, redistest.Writes(t, c), "changes counted by Redis across %d peeks", peeks)
	assert.Equal(t, keys, redistest.Dump(t, c))
	// The count does move with a write: the check can fail.
	_, err := s.AllowN(bg, "fresh", limit.PerHour(6), 1)
	require.NoError(t, err)
	assert.Greater(t, redistest.Writes(t, c), before)
}

// A peek refuses what the decision refuses, and a Redis fault is an error
// of the store's kinds.
func TestPeekRefusesWhatAllowRefuses(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := newStore(t, c)
	_, err := s.PeekN(bg, "", limit.PerHour(6), 1, Known{})
	assert.ErrorIs(t, err, limit.ErrInvalidKey)
	_, err = s.PeekN(bg, "k", limit.PerHour(6), 7, Known{})
	assert.ErrorIs(t, err, limit.ErrExceedsCapacity)
	require.NoError(t, c.Set(bg, redisKey(s.prefix, limit.PerHour(6), "str"), "x", 0).Err())
	_, err = s.PeekN(bg, "str", limit.PerHour(6), 1, Known{})
	assert.ErrorIs(t, err, ErrWrongType)
}
