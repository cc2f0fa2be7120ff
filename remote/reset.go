package remote

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Reset deletes key's state under lim in Redis, as go-redis/redis_rate's
// Reset does: the next decision finds a fresh key (a full bucket, an empty
// window or log). The per-node fields that make reports idempotent go with
// it, so a node's next report applies only what it was never told was
// applied. It reports whether there was anything to delete. It is Sync
// mode's reset; Async mode's is ResetShares.
func (s *Store) Reset(ctx context.Context, key string, lim limit.Limit) (bool, error) {
	had, _, err := s.reset(ctx, key, lim, false)
	return had, err
}

// ResetShares is Async mode's reset of key under lim: a contest's share
// nobody holds is made fresh, and the reset's time on Redis's clock is
// returned (Unix ns), for the caller to send every node through the
// registry (async.Runner.Reset): each starts the state it holds afresh.
// What the fleet admitted (the ledger) is kept.
func (s *Store) ResetShares(ctx context.Context, key string, lim limit.Limit) (bool, int64, error) {
	return s.reset(ctx, key, lim, true)
}

func (s *Store) reset(ctx context.Context, key string, lim limit.Limit, shares bool) (bool, int64, error) {
	if err := limit.CheckKey(key); err != nil {
		return false, 0, err
	}
	if err := lim.Validate(); err != nil {
		return false, 0, err
	}
	k := redisKey(s.prefix, lim, key)
	keys := []string{k, k}
	if lim.Algorithm == limit.SlidingWindowLog {
		keys[1] = k + ":n" // the same hash tag: one slot
	}
	kind, period := 0, int64(0)
	if !lim.Algorithm.IsBucket() {
		kind, period = 1, int64(lim.Period/time.Microsecond)
	}
	if lim.Algorithm == limit.SlidingWindowLog {
		kind = 2
	}
	fresh := int64(0) // Sync: how long the fresh state outlives the reset, ms
	if !shares {
		fresh = s.freshFor(lim)
	}
	active := int64(0) // Async: how long a reset with no contest is kept, µs
	if shares {
		keys = append(keys, asyncKey(s.prefix, lim, key)) // the same hash tag too
		active = int64(s.active / time.Microsecond)
	}
	vals, err := run(ctx, s.client, s.scripts.reset, keys, s.node, kind, period, fresh, active).Slice()
	if err != nil {
		return false, 0, classify("reset", key, err)
	}
	v, err := ints(vals, 2)
	if err != nil {
		return false, 0, classify("reset", key, err)
	}
	return v[0] == 1, v[1] * 1000, nil
}

// freshFor is how long, in ms, the fresh state a Sync reset leaves must
// live: until any node's copy of the state before the reset has gone stale
// enough that Redis would not restore it (a bucket refilled, a window two
// windows old), and the decide scripts' keep on top.
func (s *Store) freshFor(lim limit.Limit) int64 {
	span := lim.Tolerance()
	if !lim.Algorithm.IsBucket() {
		span = 2 * lim.Period
		if lim.Calendar != limit.NoCalendar {
			loc, err := s.zones.Load(lim.Zone)
			if err != nil {
				loc = nil
			}
			span = 2 * lim.WindowAt(time.Now().UnixNano(), loc).Len()
		}
	}
	return ms(span) + ms(s.active)
}
