package remote

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/storemodel"
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
	registerClients(t, s, n, r.Now, expiry, &r)
	require.Less(t, r.Now, expiry, "registered before they expire")
	time.Sleep(time.Duration(expiry-r.Now)*time.Microsecond + 100*time.Millisecond)
	require.NoError(t, s.ShareBeat(bg, &share.Beat{From: math.MaxInt64}, &r), "the beat that finds them expired")
	require.NoError(t, s.ShareBeat(bg, &share.Beat{}, &r), "the next beat")
	require.Empty(t, r.Changes)
	n2, err := c.HLen(bg, s.registryKeys[1]).Result()
	require.NoError(t, err)
	require.Zero(t, n2, "expired entries left in the registry")
}

// perClient is a per-client limit: one request is the whole burst.
var perClient = limit.PerSecond(1).WithBurst(1)

// registerClients registers contests of n keys "client:0" to "client:n-1"
// in (epoch, expiry µs), a thousand a beat, reading nothing; r holds the
// last beat's reply.
func registerClients(t *testing.T, s *Store, n int, epoch, expiry int64, r *share.BeatReply) {
	t.Helper()
	for first := 0; first < n; first += 1000 {
		b := share.Beat{From: math.MaxInt64}
		for i := first; i < min(first+1000, n); i++ {
			b.Contests = append(b.Contests, share.Contest{Key: "client:" + strconv.Itoa(i), Limit: perClient, Epoch: epoch, Expiry: expiry})
		}
		require.NoError(t, s.ShareBeat(bg, &b, r))
	}
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
	registerClients(t, s, n, 7, 1<<60, &r)
	require.NoError(t, s.ShareBeat(bg, &share.Beat{}, &r))
	require.Len(t, r.Changes, n)
	require.False(t, r.More)
	last := r.Changes[n-1]
	require.Equal(t, share.Contest{Key: "client:" + strconv.Itoa(n-1), Limit: perClient.Canonical(), Epoch: 7, Expiry: 1 << 60}, last)
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

// The next reading's stamp comes back as the node sent it when there is
// nothing to read, or it leaves: exactly, past what a double holds. (Lua's
// numbers are doubles: returned as one, 2^53 + 1 came back as 2^53.)
func TestRegistryReturnsTheStampItWasSent(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Client(t))
	var r share.BeatReply
	require.NoError(t, s.ShareBeat(bg, &share.Beat{}, &r))
	for _, from := range []int64{1<<53 + 1, math.MaxInt64, math.MaxInt64 - 1} {
		require.NoError(t, s.ShareBeat(bg, &share.Beat{From: from}, &r))
		require.Equal(t, from, r.Next)
		require.NoError(t, s.ShareBeat(bg, &share.Beat{From: from, Leave: true}, &r))
		require.Equal(t, from, r.Next)
	}
}

// More nodes than Lua unpacks into one call found gone at one beat: the
// beat removes them all from the fleet, and every departure is read.
func TestRegistryRecordsManyDeparturesAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := newStore(t, c)
	var r share.BeatReply
	require.NoError(t, s.ShareBeat(bg, &share.Beat{}, &r))
	const n = 10_000
	old := float64(r.Now - 2*s.active.Microseconds())
	zs := make([]redis.Z, n)
	for i := range zs {
		zs[i] = redis.Z{Score: old, Member: "dead" + strconv.Itoa(i)}
	}
	require.NoError(t, c.ZAdd(bg, s.registryKeys[0], zs...).Err())
	require.NoError(t, s.ShareBeat(bg, &share.Beat{From: r.Next}, &r))
	require.Len(t, r.Gone, n)
	require.Equal(t, 1, r.Nodes)
}

// A quiet registration (a contest no other node needs to hear of) is
// written but read by nobody, unless it replaces an earlier contest of the
// key, or an earlier contest's registration comes after it; a call on it
// is read as any. Each step: what node a registers, and what node b then
// reads, from registry.lua and from its model (storemodel.Beat) alike: the
// simulation never sends the earlier contest's registration after the
// later one's.
func TestQuietRegistrations(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	a, err := New(c, Options{Node: "a"})
	require.NoError(t, err)
	b, err := New(c, Options{Node: "b"})
	require.NoError(t, err)
	lim := limit.PerSecond(1).WithBurst(1).Canonical()
	var r share.BeatReply
	from := int64(0)
	read := func() []share.Contest {
		require.NoError(t, b.ShareBeat(bg, &share.Beat{From: from, Limit: 1000}, &r))
		from = r.Next
		return r.Changes
	}
	read()
	model := storemodel.New(1_000_000)
	now, modelFrom := int64(1_800_000_000_000_000), int64(0)
	model.Beat(now, "b", share.Beat{})
	const far = int64(1) << 51 // µs, within what a double holds exactly
	for _, step := range []struct {
		name string
		send share.Contest
		want []share.Contest // what b reads after it
	}{
		{"a new contest, quiet: nobody reads it",
			share.Contest{Key: "k", Limit: lim, Epoch: 10, Expiry: far, Quiet: true}, nil},
		{"its expiry moved on, quiet: nobody reads it",
			share.Contest{Key: "k", Limit: lim, Epoch: 10, Expiry: far + 5, Quiet: true}, nil},
		{"a call on it: read, with the latest expiry",
			share.Contest{Key: "k", Limit: lim, Epoch: 10, CallAt: 20, Expiry: far, Quiet: true},
			[]share.Contest{{Key: "k", Limit: lim, Epoch: 10, CallAt: 20, Expiry: far + 5}}},
		{"a later contest of the key, quiet: read, since it replaces one",
			share.Contest{Key: "k", Limit: lim, Epoch: 30, Expiry: far, Quiet: true},
			[]share.Contest{{Key: "k", Limit: lim, Epoch: 30, Expiry: far}}},
		{"another new contest, quiet: nobody reads it",
			share.Contest{Key: "j", Limit: lim, Epoch: 40, Expiry: far, Quiet: true}, nil},
		{"an earlier contest of that key registered after it: the later one is read",
			share.Contest{Key: "j", Limit: lim, Epoch: 35, Expiry: far, Quiet: true},
			[]share.Contest{{Key: "j", Limit: lim, Epoch: 40, Expiry: far}}},
		{"a new contest, not quiet: read",
			share.Contest{Key: "i", Limit: lim, Epoch: 50, Expiry: far},
			[]share.Contest{{Key: "i", Limit: lim, Epoch: 50, Expiry: far}}},
	} {
		require.NoError(t, a.ShareBeat(bg, &share.Beat{From: math.MaxInt64, Contests: []share.Contest{step.send}}, &r), step.name)
		got := read()
		now++
		model.Beat(now, "a", share.Beat{From: math.MaxInt64, Contests: []share.Contest{step.send}})
		mr := model.Beat(now, "b", share.Beat{From: modelFrom, Limit: 1000})
		modelFrom = mr.Next
		if len(step.want) == 0 {
			require.Empty(t, got, step.name)
			require.Empty(t, mr.Changes, "the model: %s", step.name)
			continue
		}
		require.Equal(t, step.want, got, step.name)
		require.Equal(t, step.want, mr.Changes, "the model: %s", step.name)
	}
	// Quiet entries live to their expiry like any: the registry's keys
	// outlive them.
	ttl, err := c.PTTL(bg, a.registryKeys[1]).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Hour)
}
