package envoyrls

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// counts keeps envoyproxy/ratelimit's count of each fixed window of a rule
// without an algorithm: every hit, admitted or not, per descriptor value
// and window, under the Redis key envoyproxy/ratelimit uses for it
// (<prefix><domain>_<key>_<value>_..._<window start>), apart from the
// limit. It is what the service answers limit_remaining from (the limit
// minus the fleet's count as this replica knows it), and what carries a
// window's count across a restart and across a reload that changes the
// limit, both of which start the limiter's own state afresh.
//
// No call waits on Redis but the first for a (key, window) this replica
// did not hold in the window before, which reads the fleet's count once,
// at most ReadWait, never while the limiter is degraded. Every interval,
// each (key, window) called since the last one costs two commands in one
// pipeline: the hits since, added to the count (INCRBY and EXPIRE), whose
// answer is the fleet's count. A replica at rest sends nothing.
//
// EXPIRE goes with every INCRBY, as envoyproxy/ratelimit sends it: the key
// names its window's start, so setting its expiry again only moves it
// within a window's length, and a key Redis lost and an INCRBY made again
// expires too. Plain commands need no script (nothing to load again when
// Redis lost its scripts) and on a Redis Cluster each key is its own slot:
// the pipeline splits by node.
type counts struct {
	rdb      redis.UniversalClient // nil: counts in memory only
	prefix   string
	readWait time.Duration
	sendWait time.Duration // bounds a flush
	maxKeys  int64
	degraded func() bool
	now      func() time.Time // the limiter's clock
	log      *slog.Logger

	seed   maphash.Seed
	shards [countShards]countShard
	held   atomic.Int64 // entries, across the shards

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	reads, readsFailed, flushed, flushesFailed, untracked atomic.Uint64
}

const countShards = 64

type countShard struct {
	mu      sync.Mutex
	m       map[string]*windowCount // by key and window start
	pruneAt int
}

// windowCount is one (key, window)'s count.
type windowCount struct {
	redisKey string
	window   int64 // start, Unix seconds
	secs     int64 // the window's length
	total    int64 // the fleet's count as Redis last answered (this replica's sent hits included)
	pending  int64 // hits not yet sent
	sending  int64 // hits in the flush in flight
	called   bool  // called since the last flush
	reading  chan struct{}
}

func (w *windowCount) known() int64 { return w.total + w.pending + w.sending }

func newCounts(rdb redis.UniversalClient, prefix string, interval, readWait time.Duration, maxKeys int, degraded func() bool, now func() time.Time, log *slog.Logger) *counts {
	c := &counts{rdb: rdb, prefix: prefix, readWait: readWait, sendWait: max(interval, time.Second), maxKeys: int64(maxKeys), degraded: degraded, now: now, log: log, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = map[string]*windowCount{}
		c.shards[i].pruneAt = 64
	}
	if rdb != nil {
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.run(interval)
	}
	return c
}

func (c *counts) shard(name string) *countShard {
	return &c.shards[maphash.String(c.seed, name)%countShards]
}

func windowStart(now time.Time, secs int64) int64 { return now.Unix() / secs * secs }

func entryKey(name string, window int64) string {
	return name + "\x00" + strconv.FormatInt(window, 10)
}

// add counts hits on name (the service's counter key) in the window of
// secs seconds holding now, stored in Redis under redisName and the
// window's start, and returns the fleet's count after them as this
// replica knows it. ok is false when the count is not kept: more
// (key, window)s are held than maxKeys.
func (c *counts) add(ctx context.Context, name, redisName string, secs int64, now time.Time, hits int64) (known int64, ok bool) {
	window := windowStart(now, secs)
	ek := entryKey(name, window)
	sh := c.shard(name)
	sh.mu.Lock()
	w := sh.m[ek]
	if w == nil {
		if c.held.Load() >= c.maxKeys || len(sh.m) >= sh.pruneAt {
			c.prune(sh, now)
			sh.pruneAt = max(64, 2*len(sh.m))
		}
		if c.held.Load() >= c.maxKeys {
			sh.mu.Unlock()
			c.untracked.Add(1)
			return 0, false
		}
		w = &windowCount{redisKey: c.prefix + redisName + strconv.FormatInt(window, 10), window: window, secs: secs}
		sh.m[ek] = w
		c.held.Add(1)
		// A key held in the window before is followed from the start of
		// this one; a key new here (or to a restarted replica) reads what
		// the fleet counted.
		_, before := sh.m[entryKey(name, window-secs)]
		if !before && c.rdb != nil && !c.degraded() {
			w.reading = make(chan struct{})
			w.pending += hits
			w.called = true
			reading := w.reading
			sh.mu.Unlock()
			total, err := c.read(ctx, w.redisKey)
			sh.mu.Lock()
			if err == nil {
				w.total = max(w.total, total)
			}
			close(reading)
			w.reading = nil
			known = w.known()
			sh.mu.Unlock()
			return known, true
		}
	}
	w.called = true
	if c.rdb == nil {
		w.total += hits
	} else {
		w.pending += hits
	}
	if reading := w.reading; reading != nil {
		// Another call reads the fleet's count: wait for it, as long as
		// that read may take.
		sh.mu.Unlock()
		select {
		case <-reading:
		case <-ctx.Done():
		}
		sh.mu.Lock()
	}
	known = w.known()
	sh.mu.Unlock()
	return known, true
}

// read returns the fleet's count at key, 0 when there is none.
func (c *counts) read(ctx context.Context, key string) (int64, error) {
	c.reads.Add(1)
	ctx, cancel := context.WithTimeout(ctx, c.readWait)
	defer cancel()
	n, err := c.rdb.Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		c.readsFailed.Add(1)
	}
	return n, err
}

// incr queues, on pipe, the INCRBY of w's count by hits and its EXPIRE.
func (c *counts) incr(ctx context.Context, pipe redis.Pipeliner, w *windowCount, hits int64) (*redis.IntCmd, *redis.BoolCmd) {
	return pipe.IncrBy(ctx, w.redisKey, hits), pipe.Expire(ctx, w.redisKey, time.Duration(w.secs)*time.Second)
}

// prune drops sh's counts of windows that ended before the one before
// now's, with nothing left to send. Called with sh.mu held.
func (c *counts) prune(sh *countShard, now time.Time) {
	for k, w := range sh.m {
		if w.reading == nil && w.sending == 0 && (w.pending == 0 || c.rdb == nil) && w.window+2*w.secs <= now.Unix() {
			delete(sh.m, k)
			c.held.Add(-1)
		}
	}
}

// run flushes every interval until close.
func (c *counts) run(interval time.Duration) {
	defer close(c.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.sendWait)
		c.flush(ctx, c.now())
		cancel()
	}
}

// sent is one (key, window)'s part of a flush.
type sent struct {
	sh     *countShard
	w      *windowCount
	hits   int64
	cmd    *redis.IntCmd
	expire *redis.BoolCmd
}

// flush sends, in one pipeline, the hits of every (key, window) called
// since the last flush, and takes the fleet's counts the answers carry.
// Hits of windows that have ended are dropped, not sent: no decision
// reads them any more.
func (c *counts) flush(ctx context.Context, now time.Time) {
	if c.degraded() {
		return
	}
	var batch []sent
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		c.prune(sh, now)
		for _, w := range sh.m {
			if !w.called || w.reading != nil {
				continue
			}
			w.called = false
			if w.window+w.secs <= now.Unix() {
				w.pending = 0
				continue
			}
			w.sending, w.pending = w.pending, 0
			batch = append(batch, sent{sh: sh, w: w, hits: w.sending})
		}
		sh.mu.Unlock()
	}
	if len(batch) == 0 {
		return
	}
	pipe := c.rdb.Pipeline()
	for i := range batch {
		b := &batch[i]
		b.cmd, b.expire = c.incr(ctx, pipe, b.w, b.hits)
	}
	_, err := pipe.Exec(ctx)
	failed := 0
	for _, b := range batch {
		n, err := b.cmd.Result()
		b.sh.mu.Lock()
		if err == nil {
			b.w.total = max(b.w.total, n)
			b.w.called = b.w.called || b.expire.Err() != nil // the expiry set next time
		} else {
			b.w.pending += b.hits
			b.w.called = true
			failed++
		}
		b.w.sending = 0
		b.sh.mu.Unlock()
	}
	c.flushed.Add(uint64(len(batch) - failed))
	if failed > 0 {
		c.flushesFailed.Add(1)
		c.log.Debug("envoyrls: counts not sent to Redis: sent again next time", "keys", failed, "err", err)
	}
}

// close stops the flushes and sends what is left, within ctx.
func (c *counts) close(ctx context.Context) {
	if c.stop == nil {
		return
	}
	c.closeOnce.Do(func() {
		close(c.stop)
		<-c.done
		c.flush(ctx, c.now())
	})
}
