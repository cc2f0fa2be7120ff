package remote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrCannotCheck: neither CONFIG GET nor INFO is allowed (an ACL user
// confined to what the limiter needs), so the store cannot tell what Redis
// is configured to do.
var ErrCannotCheck = errors.New("remote: cannot read the redis configuration")

// MaxmemoryPolicy returns Redis's maxmemory-policy: by CONFIG GET, or, where
// the ACL denies that (as it should for a least-privileged user), from INFO
// memory. On a Cluster or a Ring every master is asked, and the first whose
// policy can evict the limiter's keys answers (else "noeviction"). When
// neither command is allowed the error wraps ErrCannotCheck; any other
// failure is an *Error as usual.
func (s *Store) MaxmemoryPolicy(ctx context.Context) (string, error) {
	var mu sync.Mutex // ForEachMaster asks the masters at once
	var policies []string
	one := func(ctx context.Context, c redis.Cmdable) error {
		p, err := maxmemoryPolicy(ctx, c)
		if err == nil {
			mu.Lock()
			policies = append(policies, p)
			mu.Unlock()
		}
		return err
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return one(ctx, m) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error { return one(ctx, m) })
	default:
		err = one(ctx, c)
	}
	if err != nil {
		return "", err
	}
	for _, p := range policies {
		if EvictsKeys(p) {
			return p, nil
		}
	}
	return "noeviction", nil
}

func maxmemoryPolicy(ctx context.Context, c redis.Cmdable) (string, error) {
	cfg, cfgErr := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if cfgErr == nil {
		if p, ok := cfg["maxmemory-policy"]; ok && p != "" {
			return p, nil
		}
	}
	info, infoErr := c.Info(ctx, "memory").Result()
	if infoErr == nil {
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(line, "maxmemory_policy:"); ok {
				return strings.TrimSpace(v), nil
			}
		}
		infoErr = fmt.Errorf("%w: no maxmemory_policy in INFO memory", ErrBadReply)
	}
	if (cfgErr == nil || isNoPerm(cfgErr)) && isNoPerm(infoErr) {
		return "", fmt.Errorf("%w: CONFIG GET: %v; INFO: %v", ErrCannotCheck, cfgErr, infoErr)
	}
	if cfgErr != nil && !isNoPerm(cfgErr) {
		return "", classify("config", "", cfgErr)
	}
	return "", classify("config", "", infoErr)
}

// EvictsKeys reports whether Redis under maxmemory-policy policy may evict
// the limiter's keys when it reaches maxmemory: every policy but noeviction
// may, the volatile-* ones included, since every key the limiter writes has
// a time to live. An evicted key's state starts afresh: spend that was
// counted is forgotten.
func EvictsKeys(policy string) bool { return policy != "noeviction" }

// EvictedKeys returns how many keys Redis has evicted since it started
// (INFO stats' evicted_keys), summed over every master of a Cluster or a
// Ring: keys of any owner, the limiter's among them when the policy can
// evict them (EvictsKeys). A counter that falls between two reads is a
// master restarted or failed over. When INFO is not allowed the error wraps
// ErrCannotCheck; any other failure is an *Error as usual.
func (s *Store) EvictedKeys(ctx context.Context) (int64, error) {
	var mu sync.Mutex // ForEachMaster asks the masters at once
	var total int64
	one := func(ctx context.Context, c redis.Cmdable) error {
		n, err := evictedKeys(ctx, c)
		mu.Lock()
		total += n
		mu.Unlock()
		return err
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return one(ctx, m) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error { return one(ctx, m) })
	default:
		err = one(ctx, c)
	}
	if err != nil {
		return 0, err
	}
	return total, nil
}

func evictedKeys(ctx context.Context, c redis.Cmdable) (int64, error) {
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		if isNoPerm(err) {
			return 0, fmt.Errorf("%w: INFO: %v", ErrCannotCheck, err)
		}
		return 0, classify("info", "", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "evicted_keys:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: evicted_keys %q in INFO stats", ErrBadReply, strings.TrimSpace(v))
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: no evicted_keys in INFO stats", ErrBadReply)
}
