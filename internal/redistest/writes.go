package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Writes returns how many changes the server at c has applied to its data
// since it started (INFO persistence's rdb_changes_since_last_save: the
// servers here never save, so the count only grows). Every write command
// counts, whether sent alone or run by a script: a test that reads it
// before and after some calls knows whether they wrote anything.
func Writes(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "persistence").Result()
	if err != nil {
		t.Fatalf("redistest: INFO persistence: %v", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_changes_since_last_save:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("redistest: rdb_changes_since_last_save %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("redistest: INFO persistence has no rdb_changes_since_last_save: %q", info)
	return 0
}

// Dump returns every key of the server at c with its serialized value
// (DUMP): two dumps are equal when no key was added, removed or changed.
func Dump(t testing.TB, c *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := c.Dump(ctx, iter.Val()).Result()
		if err != nil && err != redis.Nil {
			t.Fatalf("redistest: DUMP %q: %v", iter.Val(), err)
		}
		out[iter.Val()] = v
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("redistest: SCAN: %v", err)
	}
	return out
}
