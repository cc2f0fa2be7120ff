package remote

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// A heartbeat removes the registry's entries that expired since the last
// one. Many may expire between two beats: a flood of per-client keys' first
// requests made as many contests at once, and the fleet then beat seldom
// (quiet beats, 200 ms apart) or not at all (Redis paused, the fleet
// redeployed). Lua unpacks at most about 8,000 values into one call: the
// heartbeat passed every expired entry to one ZREM, failed, and, since what
// it failed to remove stayed, so did every heartbeat after it, for every
// node of the fleet.
func TestRegistrySurvivesManyEntriesExpiringAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := newStore(t, c)
	var r share.BeatReply
	require.NoError(t, s.ShareBeat(bg, &share.Beat{}, &r))
	const n = 20_000
	expiry := r.Now + 2_000_000 // 2 s on the store's clock
	lim := limit.PerSecond(1).WithBurst(1)
	for first := 0; first < n; first += 1000 {
		b := share.Beat{From: math.MaxInt64} // registers, reads nothing
		for i := first; i < first+1000; i++ {
			b.Contests = append(b.Contests, share.Contest{Key: "client:" + strconv.Itoa(i), Limit: lim, Epoch: r.Now, Expiry: expiry})
		}
		require.NoError(t, s.ShareBeat(bg, &b, &r))
	}
	require.Less(t, r.Now, expiry, "registered before they expire")
	time.Sleep(time.Duration(expiry-r.Now)*time.Microsecond + 100*time.Millisecond)
	require.NoError(t, s.ShareBeat(bg, &share.Beat{From: math.MaxInt64}, &r), "the beat that finds them expired")
	require.NoError(t, s.ShareBeat(bg, &share.Beat{}, &r), "the next beat")
	require.Empty(t, r.Changes)
	n2, err := c.HLen(bg, s.registryKeys[1]).Result()
	require.NoError(t, err)
	require.Zero(t, n2, "expired entries left in the registry")
}

// A beat that reads the registry whole (no page limit: a node's first
// reading in an earlier release) returns every entry, however many.
func TestRegistryReadsManyEntriesWhole(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := newStore(t, c)
	var r share.BeatReply
	require.NoError(t, s.ShareBeat(bg, &share.Beat{}, &r))
	const n = 12_000
	lim := limit.PerSecond(1).WithBurst(1)
	for first := 0; first < n; first += 1000 {
		b := share.Beat{From: r.Next}
		for i := first; i < first+1000; i++ {
			b.Contests = append(b.Contests, share.Contest{Key: "client:" + strconv.Itoa(i), Limit: lim, Epoch: 7, Expiry: 1 << 60})
		}
		require.NoError(t, s.ShareBeat(bg, &b, &r))
	}
	require.NoError(t, s.ShareBeat(bg, &share.Beat{}, &r))
	require.Len(t, r.Changes, n)
	require.False(t, r.More)
	last := r.Changes[n-1]
	require.Equal(t, share.Contest{Key: "client:" + strconv.Itoa(n-1), Limit: lim.Canonical(), Epoch: 7, Expiry: 1 << 60}, last)
}

func TestEntryValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [4]int64
		bad  bool
	}{
		{in: "1800000000761257 1800000000772126 1800000007772126 0", want: [4]int64{1800000000761257, 1800000000772126, 1800000007772126, 0}},
		{in: "9007199254740993 0 0 1", want: [4]int64{9007199254740993, 0, 0, 1}}, // past 2^53: exact
		{in: ""}, // removed between the reading of the changes and of the values
		{in: "1 2 3", bad: true},
		{in: "1 2 3 4 5", bad: true},
		{in: "1 2 x 4", bad: true},
		{in: "1  2 3 4", bad: true},
	} {
		got, err := entryValue(tc.in)
		if tc.bad {
			require.ErrorIs(t, err, ErrBadReply, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}
