package remote

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit/internal/rateparity"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// storeSubject plays a parity sequence on one key in Redis, on Redis server
// TIME.
type storeSubject struct {
	s     *Store
	key   string
	lim   limit.Limit
	queue bool
}

func (s *storeSubject) Advance(time.Duration) {}

func (s *storeSubject) Allow(n int) (rateparity.Outcome, error) {
	d, err := s.s.AllowN(bg, s.key, s.lim, int64(n))
	return s.outcome(d, 0), err
}

func (s *storeSubject) Reserve(n int) (rateparity.Outcome, func() (time.Time, error), error) {
	d, err := s.s.ReserveN(bg, s.key, s.lim, int64(n), limit.MaxSpan)
	act := d.Now + int64(d.Delay)
	cancel := func() (time.Time, error) {
		_, c, err := s.s.CancelN(bg, s.key, s.lim, int64(n), act)
		return time.Unix(0, c.Now), err
	}
	return s.outcome(d, d.Delay), cancel, err
}

func (s *storeSubject) outcome(d Decision, delay time.Duration) rateparity.Outcome {
	o := rateparity.Outcome{OK: d.Allowed, Delay: delay, Remaining: d.Remaining, At: time.Unix(0, d.Now)}
	if s.queue {
		o.Remaining = -1
	}
	return o
}

// gcra.lua's allows, reservations and cancels answer as x/time/rate's do,
// on a single node and on a Cluster.
func TestReserveParity(t *testing.T) {
	clients := map[string]func(t *testing.T) redis.UniversalClient{
		"single": func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) },
		"cluster": func(t *testing.T) redis.UniversalClient {
			return redistest.StartCluster(t, 3).Client(t)
		},
	}
	for name, newClient := range clients {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, newClient(t))
			for seed := range uint64(2) {
				token := &storeSubject{s: s, key: fmt.Sprint("token", seed), lim: limit.PerSecond(2000).WithBurst(5)}
				bad, err := rateparity.Run(rateparity.Ops(seed, rateparity.Options{Steps: 200, MaxN: 5}), rate.NewLimiter(2000, 5), token, false)
				require.NoError(t, err)
				assert.Empty(t, bad, "token bucket, seed %d", seed)
				leaky := &storeSubject{s: s, key: fmt.Sprint("leaky", seed), lim: limit.PerSecond(2000).WithBurst(100_000).WithAlgorithm(limit.LeakyBucket), queue: true}
				bad, err = rateparity.Run(rateparity.Ops(seed, rateparity.Options{Steps: 200, MaxN: 1}), rate.NewLimiter(2000, 1), leaky, false)
				require.NoError(t, err)
				assert.Empty(t, bad, "leaky bucket, seed %d", seed)
			}
		})
	}
}

// A reservation refused for its wait spends nothing and says when it would
// fit; a full leaky queue says when a place frees up.
func TestReserveRefusals(t *testing.T) {
	s := newStore(t, redistest.Start(t).Client(t))
	tok := limit.Per(1, time.Hour).WithBurst(1)
	d, err := s.ReserveN(bg, "t", tok, 1, 0)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Zero(t, d.Delay)
	d, err = s.ReserveN(bg, "t", tok, 1, 10*time.Minute)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.InDelta(t, float64(50*time.Minute), float64(d.RetryAfter), float64(time.Second), "an hour's wait, ten minutes allowed")
	d, err = s.ReserveN(bg, "t", tok, 1, 2*time.Hour)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the refusal spent nothing")
	assert.InDelta(t, float64(time.Hour), float64(d.Delay), float64(time.Second))

	q := limit.Per(1, time.Hour).WithBurst(2).WithAlgorithm(limit.LeakyBucket)
	for range 2 {
		d, err = s.ReserveN(bg, "q", q, 1, limit.MaxSpan)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err = s.ReserveN(bg, "q", q, 1, limit.MaxSpan)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "two in the queue: full")
	assert.InDelta(t, float64(time.Hour), float64(d.RetryAfter), float64(time.Second))

	gave, _, err := s.CancelN(bg, "q", q, 1, d.Now-int64(time.Second))
	require.NoError(t, err)
	assert.False(t, gave, "a reservation whose time has passed gives nothing back")
}

// Reset deletes a key's state under one algorithm: the next decision finds
// it fresh, and the same key under another algorithm is untouched.
func TestReset(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Client(t))
	for _, lim := range []limit.Limit{
		limit.Per(2, time.Hour),
		limit.Per(2, time.Hour).WithAlgorithm(limit.LeakyBucket),
		limit.Per(2, time.Hour).WithAlgorithm(limit.FixedWindow),
		limit.Per(2, time.Hour).WithAlgorithm(limit.SlidingWindowCounter),
		limit.Per(2, time.Hour).WithAlgorithm(limit.SlidingWindowLog),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			for range 3 {
				_, err := s.AllowN(bg, "k", lim, 1)
				require.NoError(t, err)
			}
			d, err := s.AllowN(bg, "k", lim, 1)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			other := limit.Per(1, time.Hour).WithAlgorithm(limit.FixedWindow)
			if lim.Algorithm == limit.FixedWindow {
				other = other.WithAlgorithm(limit.TokenBucket)
			}
			_, err = s.AllowN(bg, "k", other, 1)
			require.NoError(t, err)

			gone, err := s.Reset(bg, "k", lim)
			require.NoError(t, err)
			assert.True(t, gone)
			d, err = s.AllowN(bg, "k", lim, 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "fresh after the reset")
			d, err = s.AllowN(bg, "k", other, 1)
			require.NoError(t, err)
			assert.False(t, d.Allowed, "another algorithm's state is untouched")
			_, err = s.Reset(bg, "k", other)
			require.NoError(t, err)
			gone, err = s.Reset(bg, "nobody", lim)
			require.NoError(t, err)
			assert.False(t, gone)
		})
	}
	_, err := s.Reset(bg, "", limit.PerSecond(1))
	assert.ErrorIs(t, err, limit.ErrInvalidKey)
	_, err = s.Reset(bg, "k", limit.PerSecond(0))
	assert.ErrorIs(t, err, limit.ErrInvalidLimit)
}
