package fleetcheck

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
)

// This file is the only one that knows how Redis records what was spent.
// Everything else asks ledgerOf which record holds a (key, limit), and reads
// held after quiescence.
//
// In Async mode every (key, limit) has a ledger in Redis: the field s of its
// hash, which holds every weight the nodes reported admitting, each report
// applied once (the nodes send running totals, and Redis applies only what
// exceeds what it applied before). Keys decided in even splits are reported
// when they leave a node's memory or the node closes; contested keys with
// every report. After every node closed, s is what the fleet admitted, but
// for what LostSpend says was dropped. Sync decisions are made by scripts
// that keep the exact state and no ledger (only the spend a node decided in
// memory while degraded is reported to it), so in Sync mode held cannot
// tell; nor can it for the sliding window log, which Async refuses.

// ledgerPrefix is the Prefix every scenario's nodes write under.
const ledgerPrefix = "fc:"

// algorithmTags are remote's names for each algorithm's keys.
var algorithmTags = [...]string{
	limit.TokenBucket:          "tb",
	limit.LeakyBucket:          "lb",
	limit.FixedWindow:          "fw",
	limit.SlidingWindowLog:     "swl",
	limit.SlidingWindowCounter: "swc",
}

// ledgerOf names the Redis record that holds key's spend under lim in Async
// mode: every (key, limit) has its own (the scenarios' keys are short
// printable ASCII, which remote uses as is).
func ledgerOf(key string, lim limit.Limit) string {
	tag := strconv.FormatInt(lim.Rate, 10) + "/" + lim.Period.String()
	if lim.Algorithm.IsBucket() {
		tag += "/" + strconv.FormatInt(lim.Capacity(), 10)
	}
	return ledgerPrefix + "l" + algorithmTags[lim.Algorithm] + ":{" + key + "}:" + tag
}

// ledger reads Redis's records of spend. It is safe for concurrent use.
type ledger struct {
	rdb  redis.UniversalClient
	mode hybrid.Mode

	mu   sync.Mutex
	seen map[string]int64 // record → its ledger, as last read
}

func newLedger(rdb redis.UniversalClient, mode hybrid.Mode) *ledger {
	return &ledger{rdb: rdb, mode: mode, seen: make(map[string]int64)}
}

// sample reads the records once. A record that could not be read (Redis
// killed or paused) keeps what was read of it before; the first error is
// returned.
func (l *ledger) sample(ctx context.Context, records []string) error {
	if l.mode != hybrid.Async {
		return nil
	}
	cmds := make([]*redis.StringCmd, 0, len(records))
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range records {
			cmds = append(cmds, p.HGet(ctx, r, "s"))
		}
		return nil
	})
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range records {
		v, cerr := cmds[i].Int64()
		if cerr == nil {
			l.seen[r] = max(l.seen[r], v)
		}
	}
	return err
}

// held returns the spend record holds, and whether Redis's state can tell.
func (l *ledger) held(record string, limits []limit.Limit) (spent int64, known bool) {
	if l.mode != hybrid.Async || len(limits) != 1 || limits[0].Algorithm == limit.SlidingWindowLog {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[record], true
}
