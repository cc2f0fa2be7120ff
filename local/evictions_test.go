package local

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// crowdedHomes picks, for a table shaped as probe (only its mask is read),
// hashes from next (called with 0, 1, 2, ... until enough are found) that
// crowd the two candidate buckets a and b of victim: three more whose first
// home is a and four whose first home is b, each with its other home
// elsewhere (so each could move there), then one whose two homes are a and
// b. With the victim placed first, the seven fill a and b, and the last
// finds both full, in a table otherwise empty.
func crowdedHomes(probe *evictions, victim uint64, next func(i int) (uint64, bool)) (fill []uint64, last uint64) {
	a, b := probe.homes(victim)
	inA, inB := 0, 0
	seen := map[uint64]bool{victim: true}
	for i := 0; inA < 3 || inB < 4 || last == 0; i++ {
		h, ok := next(i)
		if !ok || seen[h] {
			continue
		}
		x, y := probe.homes(h)
		switch {
		case x == a && y != b && inA < 3:
			inA++
		case x == b && y != a && inB < 4:
			inB++
		case (x == a && y == b || x == b && y == a) && last == 0:
			last = h
			seen[h] = true
			continue
		default:
			continue
		}
		seen[h] = true
		fill = append(fill, h)
	}
	return fill, last
}

// A record is lost only when the table is full around it, not while it has
// room: nine records in a table of 128 slots, eight of them in the victim's
// two buckets, each of which has another bucket to go to. Before: the
// ninth found both its buckets full and the victim's record, the one that
// turned fresh first, gave way (lost, counted as forgotten).
func TestEvictionsKeepEveryRecordWhileThereIsRoom(t *testing.T) {
	ev := newEvictions(128)
	require.Equal(t, 32, ev.size)
	probe := &evictions{mask: uint64(ev.size - 1)}
	victim := mix(1)
	fill, last := crowdedHomes(probe, victim, func(i int) (uint64, bool) { return mix(uint64(i) + 2), true })
	require.Len(t, fill, 7)

	now := t0
	hour := int64(time.Hour)
	assert.False(t, ev.record(victim, now+hour, 1, now), "the victim's record")
	for i, h := range fill {
		assert.False(t, ev.record(h, now+hour+int64(i+1)*int64(time.Second), 1, now), "filler %d", i)
	}
	assert.False(t, ev.record(last, now+2*hour, 1, now), "nine records in 128 slots: none is lost")

	for i, h := range append(append([]uint64{victim}, fill...), last) {
		_, frac, ok := ev.bound(h, now)
		assert.True(t, ok, "record %d kept", i)
		assert.Equal(t, 1.0, frac, "record %d intact", i)
	}
}

// Tables filled to three quarters with live records, of random hashes (of
// fixed seeds), lose none, and every record is found where a lookup
// looks, after the moves that made room. Before: a record's two buckets
// alone lost records in a sixth of the small tables half full, and in
// every large one (about 15 of 4,096 at half, 198 of 6,144 at three
// quarters).
func TestEvictionsFillBeforeForgetting(t *testing.T) {
	for _, c := range []struct{ slots, tables int }{{128, 200}, {8192, 4}} {
		t.Run(fmt.Sprint(c.slots), func(t *testing.T) {
			hour := int64(time.Hour)
			for seed := range uint64(c.tables) {
				r := rand.New(rand.NewPCG(seed, uint64(c.slots)))
				ev := newEvictions(c.slots)
				hs := make([]uint64, c.slots*3/4)
				lost := 0
				for i := range hs {
					hs[i] = r.Uint64() | 1
					freshAt := t0 + hour + int64(i)*int64(time.Millisecond)
					if ev.record(hs[i], freshAt, float64(i%7+1)/8, t0) {
						lost++
					}
				}
				require.Zero(t, lost, "seed %d: records lost at three quarters full", seed)
				for i, h := range hs {
					freshAt, frac, ok := ev.bound(h, t0)
					require.True(t, ok, "seed %d: record %d found", seed, i)
					require.Equal(t, t0+hour+int64(i)*int64(time.Millisecond), freshAt, "seed %d: record %d's time", seed, i)
					require.Equal(t, float64(i%7+1)/8, frac, "seed %d: record %d's fraction", seed, i)
				}
			}
		})
	}
}

// The same through the engine: a spent 1/hour key is evicted, then eight
// keys picked so that their records crowd the two buckets of its record,
// and all nine are asked again. Before: a record was lost with 9 in a
// shard's table of 128, and its key came back with its burst (admitted):
// the victim's (a bucket's; the one fresh first gave way), or, for a fixed
// window, where all nine turn fresh at the window's end, the last key's.
func TestAnEvictedKeyKeepsItsRecordWhenOthersCrowdItsBuckets(t *testing.T) {
	for _, lim := range []limit.Limit{
		limit.PerHour(1),
		limit.PerHour(1).WithAlgorithm(limit.FixedWindow),
		limit.PerHour(1).WithAlgorithm(limit.SlidingWindowLog),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			e := newEngine(t, Config{Shards: 1, MaxKeys: 64})
			sh := &e.shards[0]
			probe := &evictions{mask: uint64(sh.evictions.size - 1)}
			require.Equal(t, 32, sh.evictions.size)
			canon := lim.Canonical()
			rec := func(key string) uint64 { return max(limitHash(e.hash(key), canon), 1) }

			names := map[uint64]string{}
			fill, last := crowdedHomes(probe, rec("victim"), func(i int) (uint64, bool) {
				name := fmt.Sprintf("crowd-%d", i)
				h := rec(name)
				if _, dup := names[h]; dup {
					return 0, false
				}
				names[h] = name
				return h, true
			})
			// Held in this order, none used since: evicted in this order.
			order := []string{"victim"}
			for _, h := range append(fill, last) {
				order = append(order, names[h])
			}

			res, err := e.AllowN(t0, "victim", lim, 1)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			now := at(time.Second)
			for _, k := range order[1:] {
				res, err := e.AllowN(now, k, lim, 1)
				require.NoError(t, err)
				require.True(t, res.Allowed, k)
			}
			for i := len(order); i < 64; i++ { // fill the engine
				_, _ = e.AllowN(now, fmt.Sprintf("pad-%d", i), lim, 0)
			}
			require.Equal(t, 64, e.Len())
			for i := range order { // each evicts the oldest: the victim, then the crowd
				_, _ = e.AllowN(now, fmt.Sprintf("new-%d", i), lim, 0)
			}
			for _, k := range order {
				_, held := sh.keys.Peek(k)
				require.False(t, held, "%s evicted", k)
			}
			assert.Zero(t, e.EvictionsForgotten(), "9 records in 128 slots")

			for _, k := range order {
				res, err := e.AllowN(at(2*time.Second), k, lim, 1)
				require.NoError(t, err)
				assert.False(t, res.Allowed, "%s comes back as spent as it left", k)
			}
		})
	}
}

// Records recorded again, forgotten and turning fresh, in a table kept
// about full, against a plain map of what each should read: every record
// found reads what was recorded (moves never mix two records up), and
// records go missing only as many times as record reported one lost.
func TestEvictionsMovesKeepRecordsIntact(t *testing.T) {
	type want struct {
		atMs uint64
		frac uint64
	}
	r := rand.New(rand.NewPCG(7, 7))
	ev := newEvictions(256)
	pool := make([]uint64, 700)
	for i := range pool {
		pool[i] = r.Uint64() | 1
	}
	shadow := map[uint64]want{}
	now := t0
	lost, lostAll := 0, 0
	// check compares the table with the shadow, and drops from the shadow
	// what turned fresh or went missing.
	check := func() {
		for h, w := range shadow {
			if w.atMs <= uint64(now/1_000_000) {
				delete(shadow, h)
				continue
			}
			freshAt, frac, ok := ev.bound(h, now)
			if !ok {
				lost--
				require.GreaterOrEqual(t, lost, 0, "a record went missing that record did not report lost")
				delete(shadow, h) // it may come back, as a new record
				continue
			}
			require.Equal(t, int64(w.atMs)*1_000_000, freshAt)
			require.Equal(t, float64(w.frac)/fracOne, frac)
		}
	}
	for step := range 20_000 {
		now += int64(r.IntN(20)) * int64(time.Millisecond)
		h := pool[r.IntN(len(pool))]
		if r.IntN(10) == 0 {
			ev.forget(h)
			delete(shadow, h)
			continue
		}
		freshAt := now + int64(1+r.IntN(6000))*int64(time.Millisecond)
		frac := float64(r.IntN(16)) / 16
		w := want{uint64(freshAt / 1_000_000), fracOf(frac)}
		if old, ok := shadow[h]; ok && old.atMs > uint64(now/1_000_000) {
			w = want{max(old.atMs, w.atMs), max(old.frac, w.frac)}
		}
		shadow[h] = w
		if ev.record(h, freshAt, frac, now) {
			lost++
			lostAll++
			check() // which one was lost
		} else if step%4 == 0 {
			check()
		}
	}
	t.Logf("%d lost of 20,000", lostAll)
	assert.Positive(t, lostAll, "the table was full at times")
}
