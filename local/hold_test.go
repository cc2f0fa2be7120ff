package local

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// asksEngine is an engine in Asks mode (Async's share protocol) dividing
// uncontested keys among nodes, its grants good until validUntil.
func asksEngine(t *testing.T, nodes int, validUntil int64) *Engine {
	t.Helper()
	e, err := New(Config{TrackSpend: true, Asks: true, MaxKeys: 1024})
	require.NoError(t, err)
	e.SetFleet(0, nodes)
	e.SetValidUntil(validUntil)
	return e
}

// In Asks mode a request, or a reservation, is decided in the share the node
// holds, and is short (ErrShort: only the fleet can decide it) wherever the
// node holds nothing it may decide in. Each row puts one key in one state
// and asks AllowN, ReserveN and ReserveHeld for one request.
func TestAsksModeDecidesOnlyInTheShareHeld(t *testing.T) {
	const t0 = int64(1_800_000_000_000_000_000)
	bucket := limit.PerSecond(100)      // an even split of 4 holds 25
	tiny := limit.Per(1, 2*time.Second) // an even split of 4 cannot hold one request: pooled
	leaky := limit.PerSecond(100).WithAlgorithm(limit.LeakyBucket)
	type outcome struct{ allow, reserve, held error }
	short := outcome{ErrShort, ErrShort, ErrShort}
	for _, tc := range []struct {
		name  string
		lim   limit.Limit
		setup func(e *Engine, key string, lim limit.Limit)
		want  outcome
	}{
		{"even split with room", bucket, func(*Engine, string, limit.Limit) {}, outcome{}},
		{"even split spent: the reservation would wait", bucket, func(e *Engine, key string, lim limit.Limit) {
			for range 25 {
				_, err := e.AllowN(t0, key, lim, 1)
				require.NoError(t, err)
			}
		}, outcome{ErrShort, ErrShort, nil}},
		{"pooled: no even split", tiny, func(*Engine, string, limit.Limit) {}, short},
		{"a leaky meter is whole or nothing", leaky, func(*Engine, string, limit.Limit) {}, short},
		{"contested, nothing held", bucket, func(e *Engine, key string, lim limit.Limit) {
			_, _ = e.AllowN(t0, key, lim, 0)
			require.True(t, e.Hold(key, lim, 0))
		}, short},
		{"contested, a grant of the whole limit", bucket, func(e *Engine, key string, lim limit.Limit) {
			_, _ = e.AllowN(t0, key, lim, 0)
			require.True(t, e.Hold(key, lim, ShareOne))
		}, outcome{}},
		{"contested, a grant given back (the old share must not decide)", bucket, func(e *Engine, key string, lim limit.Limit) {
			_, _ = e.AllowN(t0, key, lim, 0)
			require.True(t, e.Hold(key, lim, ShareOne))
			require.True(t, e.Hold(key, lim, 0))
		}, short},
		{"contested, a grant past what the node can vouch for", bucket, func(e *Engine, key string, lim limit.Limit) {
			_, _ = e.AllowN(t0, key, lim, 0)
			require.True(t, e.Hold(key, lim, ShareOne))
			e.SetValidUntil(t0 - 1)
		}, short},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got outcome
			for i, call := range []func(e *Engine, key string) error{
				func(e *Engine, key string) error { _, err := e.AllowN(t0, key, tc.lim, 1); return err },
				func(e *Engine, key string) error { _, err := e.ReserveN(t0, key, tc.lim, 1, time.Second); return err },
				func(e *Engine, key string) error {
					_, err := e.ReserveHeld(t0, key, tc.lim, 1, time.Second)
					return err
				},
			} {
				e := asksEngine(t, 4, t0+int64(time.Hour))
				tc.setup(e, "k", tc.lim)
				err := call(e, "k")
				if err != nil && !errors.Is(err, ErrShort) {
					t.Fatalf("call %d: %v", i, err)
				}
				*[]*error{&got.allow, &got.reserve, &got.held}[i] = err
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// A reservation in Asks mode moves the token bucket's shadow as an
// admission does: the store may take the shadow for the fleet's exact state
// (a creator alone since its share was full), which must count it.
func TestReservationsMoveTheShadow(t *testing.T) {
	const t0 = int64(1_800_000_000_000_000_000)
	lim := limit.PerSecond(100)
	e := asksEngine(t, 1, t0+int64(time.Hour))
	for range 3 {
		r, err := e.ReserveN(t0, "k", lim, 1, time.Second)
		require.NoError(t, err)
		require.True(t, r.Allowed)
	}
	snap, ok := e.Snapshot(t0, "k", lim)
	require.True(t, ok)
	assert.Equal(t, 3*int64(lim.Interval()), snap.Shadow.Level, "three requests in the exact bucket's level")
}

// A pooled key (its even split cannot hold one request, so the node holds
// none of it) grown the whole limit takes the pool's state whole: the even
// split it never decided in adds no fresh room. It did: a pinned client at
// 1/s on one node of three was admitted again 0.67 s after its first
// request, its home's level two thirds of the pool's.
func TestAPooledKeyGrownWholeTakesThePoolsState(t *testing.T) {
	const t0 = int64(1_800_000_000_000_000_000)
	e := asksEngine(t, 3, t0+int64(time.Hour))
	lim := limit.PerSecond(1)
	_, err := e.AllowN(t0, "client", lim, 1)
	require.ErrorIs(t, err, ErrShort, "pooled: the node holds none of it")
	spentOne := share.State{Level: int64(time.Second)} // the pool served one request at t0
	require.True(t, e.GrowBy(t0, "client", lim, ShareOne, spentOne))
	for _, tc := range []struct {
		after time.Duration
		want  bool
	}{{700 * time.Millisecond, false}, {990 * time.Millisecond, false}, {time.Second, true}} {
		peek, err := e.PeekN(t0+int64(tc.after), "client", lim, 1)
		require.NoError(t, err)
		assert.Equal(t, tc.want, peek.Allowed, "%v after the served request", tc.after)
	}
}

// A key the node holds a grant of, evicted under a flood of new keys (more
// than the records of evictions can hold), comes back wholly spent, not
// fresh: the grant had admitted what it had, and Redis still counts it
// held here. (A home of 1 an hour admitted a second request at once; the
// fleet checker found it, seeds 778015, 778131 and 778145.)
func TestAContestedKeyEvictedComesBackSpent(t *testing.T) {
	const t0 = int64(1_800_000_000_000_000_000)
	e, err := New(Config{Shards: 1, MaxKeys: 16, TrackSpend: true, Asks: true})
	require.NoError(t, err)
	e.SetFleet(0, 1)
	e.SetValidUntil(t0 + int64(time.Hour))
	e.SetClaimed(func(key string, _ limit.Limit) (Share, bool) {
		if key == "home" {
			return ShareOne, true // its whole limit granted here
		}
		return 0, false
	})
	lim := limit.Per(1, time.Hour)
	res, err := e.AllowN(t0, "home", lim, 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	for i := range 2000 { // each spent and evicted: the records fill
		_, err := e.AllowN(t0+int64(i), fmt.Sprintf("k%d", i), lim, 1)
		require.NoError(t, err)
	}
	peek, err := e.PeekN(t0+int64(time.Second), "home", lim, 1)
	require.NoError(t, err)
	assert.False(t, peek.Allowed, "a granted key evicted and made again admitted a second request of 1 an hour")
}
