package envoyrls

import (
	"context"
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
// did not hold in the window before, which must learn the fleet's count:
// it sends its own hits at once, INCRBY and EXPIRE in one round trip, as
// envoyproxy/ratelimit sends every call's, and the sum INCRBY answers is
// the fleet's count with them. It waits at most readWait for that answer,
// and never while the limiter is degraded. Every interval, each
// (key, window) called since then costs the same two commands, in one
// pipeline: the hits since, added to the count, whose answer is the
// fleet's count. So a key called once in its window costs Redis what it
// costs envoyproxy/ratelimit, and a key called more often costs two
// commands an interval, however many calls. A replica at rest sends
// nothing.
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
	sendWait time.Duration // bounds a send to Redis, a first call's as a flush's
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
	firsts    sync.WaitGroup // first calls' sends in flight

	reads, readsFailed, flushed, flushesFailed, untracked atomic.Uint64
}

const countShards = 64

type countShard struct {
	mu      sync.Mutex
	m       map[string]*windowCount // by key and window start
	pruneAt int
	closed  bool // no first call sends any more
}

// windowCount is one (key, window)'s count.
type windowCount struct {
	redisKey string
	window   int64 // start, Unix seconds
	secs     int64 // the window's length
	total    int64 // the fleet's count as Redis last answered (this replica's sent hits included)
	pending  int64 // hits not yet sent
	sending  int64 // hits on their way to Redis, by a flush or a first call
	called   bool  // called since the last flush
	// reading is a first call's wait for the fleet's count, closed when
	// it stops waiting (answered or not).
	reading chan struct{}
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
		// this one; a key new here (or to a restarted replica) sends its
		// hits at once and learns what the fleet counted from the answer.
		_, before := sh.m[entryKey(name, window-secs)]
		if !before && c.rdb != nil && !sh.closed && !c.degraded() {
			return c.first(ctx, sh, w, hits), true
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

// first sends the hits of w's first call (w new, sh.mu held, released on
// return), and returns the fleet's count after them as this replica knows
// it: Redis's answer if it comes within readWait, else what the replica
// knows, these hits included. Calls for w meanwhile wait for the answer as
// long as this one does, and add theirs to pending.
//
// A late answer is not lost: the send goes on, up to sendWait, in its own
// goroutine, and its sum is taken when it comes, so hits Redis counted are
// not sent again. Only a send that fails (an error, or no answer within
// sendWait) leaves the hits pending, for the flush to send. When Redis
// applied the INCRBY and its answer was lost with the connection, the
// flush counts them a second time: the error errs toward refusing, as
// only a count short of the hits could admit more than the limit.
func (c *counts) first(ctx context.Context, sh *countShard, w *windowCount, hits int64) int64 {
	c.reads.Add(1)
	reading := make(chan struct{})
	w.reading, w.sending = reading, hits
	c.firsts.Add(1) // under sh.mu: close waits for it (see close)
	sh.mu.Unlock()

	answered := make(chan error, 1)
	go func() {
		defer c.firsts.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.sendWait)
		defer cancel()
		pipe := c.rdb.Pipeline()
		incr, expire := c.incr(sctx, pipe, w, hits)
		_, _ = pipe.Exec(sctx)
		sh.mu.Lock()
		err := w.answered(hits, incr, expire)
		sh.mu.Unlock()
		if err != nil {
			c.log.Debug("envoyrls: a first call's count not sent to Redis: sent by the flush", "err", err)
		}
		answered <- err
	}()

	wait, cancel := context.WithTimeout(ctx, c.readWait)
	defer cancel()
	failed := false
	select {
	case err := <-answered:
		failed = err != nil
	case <-wait.Done():
		failed = true
	}
	sh.mu.Lock()
	close(reading)
	w.reading = nil
	known := w.known()
	sh.mu.Unlock()
	if failed {
		c.readsFailed.Add(1)
	}
	return known
}

// answered takes Redis's answer to hits of w sent by INCRBY and EXPIRE (a
// first call's or a flush's; the shard's lock held): the sum is the fleet's
// count, and hits whose INCRBY failed are pending again, for the next
// flush. An expiry not set is set by the next flush, with what is pending
// then (nothing, maybe: INCRBY 0). It returns the INCRBY's error.
func (w *windowCount) answered(hits int64, incr *redis.IntCmd, expire *redis.BoolCmd) error {
	w.sending = 0
	n, err := incr.Result()
	if err != nil {
		w.pending += hits
		w.called = true
		return err
	}
	w.total = max(w.total, n)
	w.called = w.called || expire.Err() != nil
	return nil
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
			if !w.called || w.reading != nil || w.sending != 0 {
				continue // a first call's send in flight: its answer comes first
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
		b.sh.mu.Lock()
		if b.w.answered(b.hits, b.cmd, b.expire) != nil {
			failed++
		}
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
		// No first call sends after this: one that began before counted
		// itself in firsts under its shard's lock.
		for i := range c.shards {
			sh := &c.shards[i]
			sh.mu.Lock()
			sh.closed = true
			sh.mu.Unlock()
		}
		c.firsts.Wait()
		c.flush(ctx, c.now())
	})
}
