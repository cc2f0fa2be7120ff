package remote

import (
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/limit"
)

// UseClockKey makes s's share scripts read the store's clock (Unix µs) from
// key instead of Redis server TIME, so that a test can replay a simulated
// clock on a real redis-server, and count the ops shares.lua's fast path
// answers in FastKey(key). It panics if a script no longer reads TIME, or
// marks the fast path's answer, the way it replaces.
func (s *Store) UseClockKey(key string) {
	const timeLines = "local clock = redis.call('TIME')\nlocal now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])\n"
	const fastLine = "  -- answered fast\n"
	fromKey := "local now = tonumber(redis.call('GET', '" + key + "'))\n"
	count := "  redis.call('INCR', '" + FastKey(key) + "')\n"
	for _, sc := range []struct {
		src string
		to  **redis.Script
	}{{sharesSrc, &s.scripts.shares}, {registrySrc, &s.scripts.registry}, {resetSrc, &s.scripts.reset}} {
		if !strings.Contains(sc.src, timeLines) {
			panic("remote: a share script no longer reads TIME as UseClockKey expects")
		}
		src := strings.Replace(sc.src, timeLines, fromKey, 1)
		if sc.src == sharesSrc {
			if !strings.Contains(src, fastLine) {
				panic("remote: shares.lua no longer marks its fast path's answer as UseClockKey expects")
			}
			src = strings.ReplaceAll(src, fastLine, count)
		}
		*sc.to = redis.NewScript(src)
	}
}

// FastKey is where a store under UseClockKey(key) counts the ops shares.lua's
// fast path answered.
func FastKey(clockKey string) string { return clockKey + ":fast" }

// ShareKey is the name of (key, lim)'s hash under s.
func (s *Store) ShareKey(key string, lim limit.Limit) string { return asyncKey(s.prefix, lim, key) }
