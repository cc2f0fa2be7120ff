package remote

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// MaxRawKey is the longest caller key that appears in a Redis key as it is;
// longer keys are hashed.
const MaxRawKey = 128

// maxPrefix bounds Options.Prefix.
const maxPrefix = 64

// algorithmTags name each algorithm's keys, so one caller key under two
// algorithms never shares state.
var algorithmTags = [...]string{
	limit.TokenBucket:          "tb",
	limit.LeakyBucket:          "lb",
	limit.FixedWindow:          "fw",
	limit.SlidingWindowLog:     "swl",
	limit.SlidingWindowCounter: "swc",
}

// redisKey is the Redis key of key's state under lim:
//
//	<prefix><alg>:{<key>}:<rate>/<period>[/<burst>]
//
// One key under several limits (a client under a per-second and a per-hour
// limit, or under several endpoint rules) holds one state per limit, so
// deciding under one never touches another's. The caller's key is the
// Cluster hash tag, so every Redis key of one caller key (the sliding log
// has two) lives in one slot. A key that is longer than MaxRawKey, that has
// bytes outside printable ASCII or braces (which would break the hash tag),
// or that starts with '#', appears instead as '#' and the hex of the first
// 16 bytes of its SHA-256: never truncated into a collision, never rejected,
// and never mistaken for a raw key.
func redisKey(prefix string, lim limit.Limit, key string) string {
	var b strings.Builder
	b.Grow(len(prefix) + 6 + min(len(key), 2*16+1) + 32)
	b.WriteString(prefix)
	b.WriteString(algorithmTags[lim.Algorithm])
	b.WriteString(":{")
	b.WriteString(safeKey(key))
	b.WriteString("}:")
	b.WriteString(limitTag(lim))
	return b.String()
}

// asyncKey is the Redis key of key's contest under lim in Async mode
// (shares.lua): '<prefix>a<alg>:{<key>}:<limit>'. It is not the key Sync
// decisions keep the exact state in (redisKey): the two hold different
// things, and a fleet runs one mode.
func asyncKey(prefix string, lim limit.Limit, key string) string {
	return prefix + "a" + redisKey("", lim, key)
}

// ledgerKey is the Redis key of key's ledger under lim in Async mode
// (ledger.lua): '<prefix>l<alg>:{<key>}:<limit>', in the contest's slot. A
// key of its own: a contest ends and is deleted long before the ledger
// that outlives it.
func ledgerKey(prefix string, lim limit.Limit, key string) string {
	return prefix + "l" + redisKey("", lim, key)
}

// limitTag names a limit within a key: its rate, period and, for the
// buckets, burst, exactly ("100/1s/20"); a calendar limit's rate, unit and
// zone ("1000/month@Europe/Paris").
func limitTag(lim limit.Limit) string {
	var buf [64]byte
	b := strconv.AppendInt(buf[:0], lim.Rate, 10)
	b = append(b, '/')
	if lim.Calendar != limit.NoCalendar {
		// "1000/month@Europe/Paris": the zone is part of the limit.
		b = append(b, lim.Calendar.String()...)
		b = append(b, '@')
		b = append(b, cmp.Or(lim.Zone, "UTC")...)
		return string(b)
	}
	b = append(b, lim.Period.String()...)
	if lim.Algorithm.IsBucket() {
		b = append(b, '/')
		b = strconv.AppendInt(b, lim.Capacity(), 10)
	}
	return string(b)
}

// safeKey returns key as it may appear in a Redis key (see redisKey).
func safeKey(key string) string {
	if rawOK(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "#" + hex.EncodeToString(sum[:16])
}

func rawOK(key string) bool {
	if len(key) == 0 || len(key) > MaxRawKey || key[0] == '#' {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// checkPrefix reports whether prefix can start every key: printable, without
// braces (the first brace of a key starts its Cluster hash tag).
func checkPrefix(prefix string) error {
	if len(prefix) > maxPrefix {
		return fmt.Errorf("remote: Prefix of %d bytes exceeds %d", len(prefix), maxPrefix)
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c < ' ' || c > '~' || c == '{' || c == '}' {
			return fmt.Errorf("remote: Prefix %q: byte %q not allowed (printable ASCII without braces)", prefix, c)
		}
	}
	return nil
}

// claimMember names (key, lim) in the registry of contested keys
// (registry.lua): the algorithm, the limit, then the key itself, which may
// hold any byte.
func claimMember(key string, lim limit.Limit) string {
	return algorithmTags[lim.Algorithm] + "|" + limitTag(lim) + "|" + key
}

// parseClaimMember reads a claim member back.
func parseClaimMember(m string) (string, limit.Limit, bool) {
	alg, rest, ok := strings.Cut(m, "|")
	if !ok {
		return "", limit.Limit{}, false
	}
	tag, key, ok := strings.Cut(rest, "|")
	if !ok || key == "" {
		return "", limit.Limit{}, false
	}
	var lim limit.Limit
	found := false
	for a, t := range algorithmTags {
		if t == alg {
			lim.Algorithm, found = limit.Algorithm(a), true
		}
	}
	parts := strings.Split(tag, "/")
	if !found || len(parts) < 2 {
		return "", limit.Limit{}, false
	}
	rate, err1 := strconv.ParseInt(parts[0], 10, 64)
	period, err2 := time.ParseDuration(parts[1])
	if err1 != nil || err2 != nil {
		return "", limit.Limit{}, false
	}
	lim.Rate, lim.Period = rate, period
	if len(parts) == 3 {
		burst, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			return "", limit.Limit{}, false
		}
		if burst != rate {
			lim.Burst = burst
		}
	}
	if lim.Validate() != nil || limitTag(lim) != tag {
		return "", limit.Limit{}, false
	}
	return key, lim, true
}
