package remote

import (
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/limit"
)

// UseClockKey makes s's share scripts read the store's clock (Unix µs) from
// key instead of Redis server TIME, so that a test can replay a simulated
// clock on a real redis-server. It panics if a script no longer reads TIME
// the way it replaces.
func (s *Store) UseClockKey(key string) {
	const timeLines = "local clock = redis.call('TIME')\nlocal now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])\n"
	fromKey := "local now = tonumber(redis.call('GET', '" + key + "'))\n"
	for _, sc := range []struct {
		src string
		to  **redis.Script
	}{{sharesSrc, &s.scripts.shares}, {registrySrc, &s.scripts.registry}} {
		if !strings.Contains(sc.src, timeLines) {
			panic("remote: a share script no longer reads TIME as UseClockKey expects")
		}
		*sc.to = redis.NewScript(strings.Replace(sc.src, timeLines, fromKey, 1))
	}
}

// ShareKey is the name of (key, lim)'s hash under s.
func (s *Store) ShareKey(key string, lim limit.Limit) string { return asyncKey(s.prefix, lim, key) }
