package remote

import (
	"context"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Reset deletes key's state under lim's algorithm in Redis, as
// go-redis/redis_rate's Reset does: the next decision finds a fresh key
// (a full bucket, an empty window or log). The per-node fields that make
// reports idempotent go with it, so a node's next report applies only what
// it was never told was applied. lim's rate and period do not matter. It
// reports whether there was anything to delete.
func (s *Store) Reset(ctx context.Context, key string, lim limit.Limit) (bool, error) {
	if err := limit.CheckKey(key); err != nil {
		return false, err
	}
	if err := lim.Validate(); err != nil {
		return false, err
	}
	k := redisKey(s.prefix, lim, key)
	keys := []string{k}
	if lim.Algorithm == limit.SlidingWindowLog {
		keys = append(keys, k+":n") // the same hash tag: one slot
	}
	n, err := s.client.Del(ctx, keys...).Result()
	if err != nil {
		return false, classify("reset", key, err)
	}
	return n > 0, nil
}
