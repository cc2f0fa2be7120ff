package remote

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// leastPrivilege is the ACL rule docs/redis.md gives for the limiter's user
// (after "ACL SETUSER <user> on ><password> "): its prefix's keys only, and
// only the commands it sends and its scripts call.
const leastPrivilege = "resetkeys ~rl:* resetchannels &rl:* -@all +ping +evalsha +script|load +subscribe " +
	"+time +get +set +exists +hget +hmget +hgetall +hset +hdel +hincrby +del +pexpire +pexpireat +pttl +zadd +zcard +zrange +zrangebyscore +zrem +zremrangebyscore +publish"

// The rule names every command the scripts call (so a script that starts
// calling another fails here, not in production), and docs/redis.md gives
// it as it is.
func TestLeastPrivilegeRuleCoversTheScripts(t *testing.T) {
	allowed := map[string]bool{}
	for _, f := range strings.Fields(leastPrivilege) {
		if f == "+subscribe" {
			continue // the client's, not a script's
		}
		if c, ok := strings.CutPrefix(f, "+"); ok {
			allowed[c] = true
		}
	}
	called := regexp.MustCompile(`redis\.p?call\('([A-Za-z]+)'`)
	var missing []string
	for _, src := range sources() {
		for _, m := range called.FindAllStringSubmatch(src, -1) {
			if c := strings.ToLower(m[1]); !allowed[c] && !slices.Contains(missing, c) {
				missing = append(missing, c)
			}
		}
	}
	sort.Strings(missing)
	assert.Empty(t, missing, "commands the scripts call that the rule does not allow")
	doc, err := os.ReadFile("../docs/redis.md")
	require.NoError(t, err)
	assert.True(t, strings.Contains(strings.Join(strings.Fields(string(doc)), " "), leastPrivilege), "docs/redis.md gives the rule %q", leastPrivilege)
}

// The library works under the least-privileged user: decisions of every
// algorithm and reconciliation rounds, also after Redis lost its scripts
// (SCRIPT FLUSH), which it recovers by SCRIPT LOAD and EVALSHA, EVAL being
// denied. The same user cannot read the configuration: the eviction check
// says so rather than failing.
func TestLeastPrivilegedUserWorksAndRecovers(t *testing.T) {
	srv := redistest.Start(t)
	_, err := srv.Do(append([]any{"ACL", "SETUSER", "limiter", "on", ">s3cret"}, fieldsOf(leastPrivilege)...)...)
	require.NoError(t, err)
	c := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "limiter", "s3cret"; o.MaxRetries = -1 })
	s, err := New(c, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Ping(bg))
	require.ErrorContains(t, c.Eval(bg, "return 1", nil).Err(), "NOPERM", "EVAL is denied")

	lims := []limit.Limit{
		limit.PerSecond(100),
		limit.PerSecond(100).WithAlgorithm(limit.LeakyBucket),
		limit.PerSecond(100).WithAlgorithm(limit.FixedWindow),
		limit.PerSecond(100).WithAlgorithm(limit.SlidingWindowCounter),
		limit.PerSecond(100).WithAlgorithm(limit.SlidingWindowLog),
	}
	failures := 0
	for round := range 3 {
		if round > 0 {
			_, err := srv.Do("SCRIPT", "FLUSH")
			require.NoError(t, err)
		}
		for _, lim := range lims {
			d, err := s.AllowN(bg, fmt.Sprint("k", round), lim, 1)
			if !assert.NoError(t, err, "%v after %d flushes", lim.Algorithm, round) {
				failures++
				continue
			}
			assert.True(t, d.Allowed)
		}
		if round > 0 {
			_, err := srv.Do("SCRIPT", "FLUSH")
			require.NoError(t, err)
		}
		var r Round
		err := s.Reconcile(bg, []Report{{Key: "r", Limit: lims[0], Epoch: 1, Total: int64(round + 1), Demand: 1}}, &r)
		if assert.NoError(t, err, "reconcile after %d flushes", round) {
			assert.NoError(t, r.Answers[0].Err)
		} else {
			failures++
		}
	}
	// Async mode's share protocol: an op, a heartbeat that calls, and the
	// call heard on the channel.
	heard := make(chan share.Contest, 1)
	stop := s.SubscribeCalls(bg, CallListener{Heard: func(c share.Contest) {
		select {
		case heard <- c:
		default:
		}
	}})
	defer stop()
	time.Sleep(50 * time.Millisecond) // the subscription reaches Redis
	replies := make([]share.Reply, 1)
	err = s.ShareOps(bg, share.Settings{Lease: 1e6, CallWindow: 4e4, Cooldown: 2e5},
		[]share.Op{{Key: "s", Limit: lims[0], Want: 1, Need: share.One, Fleet: 2, Seq: 1, Full: -1, Shadow: -1}}, replies)
	if assert.NoError(t, err, "share op") {
		assert.NoError(t, replies[0].Err)
	} else {
		failures++
	}
	var br share.BeatReply
	err = s.ShareBeat(bg, &share.Beat{Contests: []share.Contest{{Key: "s", Limit: lims[0], Epoch: 1, CallAt: 2, Expiry: 1 << 60}}}, &br)
	if assert.NoError(t, err, "heartbeat") {
		select {
		case c := <-heard:
			assert.Equal(t, "s", c.Key)
		case <-time.After(5 * time.Second):
			t.Error("the call was not heard on the channel")
		}
	} else {
		failures++
	}
	t.Logf("%d calls failed across 3 rounds of decisions and reconciliation, and the share protocol's", failures)

	_, err = s.MaxmemoryPolicy(bg)
	assert.ErrorIs(t, err, ErrCannotCheck)
	_, err = s.EvictedKeys(bg)
	assert.ErrorIs(t, err, ErrCannotCheck)

	// With INFO allowed too, the policy is read from it.
	_, err = srv.Do("ACL", "SETUSER", "limiter", "+info")
	require.NoError(t, err)
	p, err := s.MaxmemoryPolicy(bg)
	require.NoError(t, err)
	assert.Equal(t, "noeviction", p)
	_, err = s.EvictedKeys(bg)
	assert.NoError(t, err)
}

func fieldsOf(rule string) []any {
	var out []any
	for _, f := range strings.Fields(rule) {
		out = append(out, f)
	}
	return out
}

// The eviction check reads each policy as Redis has it, and tells the ones
// that can evict the limiter's keys (every key it writes has a TTL, so the
// volatile-* policies can too).
func TestMaxmemoryPolicy(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(srv.Client(t), Options{})
	require.NoError(t, err)
	for _, policy := range []string{"noeviction", "allkeys-lru", "allkeys-random", "volatile-lru", "volatile-ttl", "allkeys-lfu"} {
		_, err := srv.Do("CONFIG", "SET", "maxmemory-policy", policy)
		require.NoError(t, err)
		got, err := s.MaxmemoryPolicy(bg)
		require.NoError(t, err)
		assert.Equal(t, policy, got)
		assert.Equal(t, policy != "noeviction", EvictsKeys(got), policy)
	}
}

// EvictedKeys follows Redis's count of evicted keys: none under
// noeviction, where a full Redis refuses writes, and every one under a
// policy that evicts.
func TestEvictedKeys(t *testing.T) {
	for _, tc := range []struct {
		policy string
		evicts bool
	}{{"noeviction", false}, {"allkeys-lru", true}, {"volatile-ttl", true}} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "2mb", "--maxmemory-policy", tc.policy))
			c := srv.Client(t)
			s, err := New(c, Options{})
			require.NoError(t, err)
			n, err := s.EvictedKeys(bg)
			require.NoError(t, err)
			assert.Zero(t, n)
			val := strings.Repeat("v", 1000)
			cmds, _ := c.Pipelined(bg, func(p redis.Pipeliner) error {
				for i := range 5000 { // 5 MB: well past maxmemory
					p.Set(bg, fmt.Sprint("other:", i), val, time.Hour)
				}
				return nil
			})
			written := 0
			for _, cmd := range cmds {
				if cmd.Err() == nil {
					written++
				}
			}
			n, err = s.EvictedKeys(bg)
			require.NoError(t, err)
			if tc.evicts {
				assert.Equal(t, 5000, written)
				assert.Positive(t, n, "Redis made room by evicting")
			} else {
				assert.Less(t, written, 5000, "a full Redis refused writes")
				assert.Zero(t, n)
			}
		})
	}
}

// Why volatile-ttl is the worst policy for a limiter: every key the
// limiter writes lives about until it is fresh again, so a key being
// limited has the shortest time to live in a Redis whose other keys live
// longer, and volatile-ttl evicts the shortest first, each time Redis needs
// room: the decision after starts from a fresh burst. allkeys-lru (as
// volatile-lru, allkeys-lfu) evicts the least recently used first, never
// the key in use. Decisions here name no estimate (as the hybrid limiter's
// Sync decisions do, which restores a key found gone while its node knew it
// had spent). Redis's LRU clock counts whole seconds: the other client's
// data is written a second before, so that it is older than the key in use
// by Redis's measure.
//
// How often the key in use goes is not fixed. Redis needs room every nine
// or ten decisions, and picks what to evict from a sample of the keys with
// a time to live (maxmemory-samples 64, the most it takes): with a few
// hundred such keys the sample holds the key in use only some of the
// times, more often early while there are fewer keys. 9 to 18 evictions of
// it were seen in 300 decisions, and a run whose samples missed it for over
// 100 decisions admitted 194, not 300. So the test looks before each
// decision whether the key is gone, and holds the limiter to what that
// implies rather than to a count of admissions: the key in use was evicted
// again and again, and each time the decision after started from a fresh
// burst (admitting at least what a fresh burst holds up to the next
// eviction), which an exact limiter never would.
func TestVolatileTTLEvictsTheKeysInUseFirst(t *testing.T) {
	for _, tc := range []struct {
		policy string
		over   bool
	}{{"volatile-ttl", true}, {"allkeys-lru", false}} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "2mb", "--maxmemory-policy", tc.policy, "--maxmemory-samples", "64"))
			c := srv.Client(t)
			s, err := New(c, Options{})
			require.NoError(t, err)
			// Another client's data, living a day, fills Redis.
			for i := range 100 {
				require.NoError(t, c.Set(bg, fmt.Sprint("old:", i), strings.Repeat("v", 20<<10), 24*time.Hour).Err())
			}
			time.Sleep(1100 * time.Millisecond)
			const burst, decisions = 100, 300
			lim := limit.Per(burst, time.Hour) // no refill to speak of during the test
			hot := redisKey(s.prefix, lim, "hot")
			// gone: the decisions before which the key in use was found
			// evicted (it lives at least 36 s once written, longer than
			// the test). fresh: what an exact bucket admits if each of them
			// starts from a fresh burst, as an evicted key does; the least
			// the limiter can admit, evictions Redis makes during a
			// decision's own script (unseen here) only adding to it.
			admitted, fresh, last := 0, 0, 0
			var gone []int
			for i := range decisions {
				if i > 0 {
					n, err := c.Exists(bg, hot).Result()
					require.NoError(t, err)
					if n == 0 {
						gone = append(gone, i)
						fresh += min(burst, i-last)
						last = i
					}
				}
				d, err := s.AllowN(bg, "hot", lim, 1)
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				}
				// More of it: each write needs room.
				require.NoError(t, c.Set(bg, fmt.Sprint("new:", i), strings.Repeat("v", 2<<10), 24*time.Hour).Err())
			}
			fresh += min(burst, decisions-last)
			evicted, err := s.EvictedKeys(bg)
			require.NoError(t, err)
			require.Positive(t, evicted, "Redis was full and made room")
			t.Logf("%s: %d of %d admitted where %d are allowed; %d keys evicted, the key in use %d times (before decisions %v)",
				tc.policy, admitted, decisions, burst, evicted, len(gone), gone)
			if tc.over {
				assert.GreaterOrEqual(t, len(gone), 5, "the key in use was evicted again and again")
				assert.GreaterOrEqual(t, admitted, fresh, "each eviction of the key in use gave it a fresh burst")
				assert.Greater(t, admitted, burst, "the limiter admitted over its limit")
			} else {
				assert.Empty(t, gone, "the key in use was kept")
				assert.Equal(t, burst, admitted, "the limit held")
			}
		})
	}
}

// At the sliding window log's largest size (limit.MaxLogRate requests in
// the log), a denial costs Redis no more than an admission: it finds when
// enough weight leaves by a binary search on running totals. It used to
// read the whole log (ZRANGE 0 -1 WITHSCORES): 40 to 75 ms per denial, longer
// than the limiter's 50 ms Redis timeout, stalling every other tenant.
func TestSlidingLogDenialIsLogarithmic(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s, err := New(c, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Ping(bg))
	lim := limit.Per(limit.MaxLogRate, time.Hour).WithAlgorithm(limit.SlidingWindowLog)
	k := redisKey(s.prefix, lim, "big")
	args := []any{int64(lim.Period / time.Microsecond), lim.Rate, 1, ms(s.active)}
	for left := lim.Rate; left > 0; {
		pipe := c.Pipeline()
		for range min(left, 5000) {
			s.scripts.log.EvalSha(bg, pipe, []string{k, k + ":n"}, args...)
			left--
		}
		_, err := pipe.Exec(bg)
		require.NoError(t, err)
	}
	n, err := c.ZCard(bg, k).Result()
	require.NoError(t, err)
	require.Equal(t, lim.Rate, n, "the log is full")

	_, err = srv.Do("CONFIG", "SET", "slowlog-log-slower-than", "0")
	require.NoError(t, err)
	_, err = srv.Do("CONFIG", "SET", "slowlog-max-len", "1024")
	require.NoError(t, err)
	_, err = srv.Do("SLOWLOG", "RESET")
	require.NoError(t, err)
	for range 20 { // side by side, so that both meet the same machine
		d, err := s.AllowN(bg, "big", lim, 1)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		assert.Positive(t, d.RetryAfter)
		_, err = s.AllowN(bg, fmt.Sprint("small", 0), lim, 1)
		require.NoError(t, err)
	}
	logs, err := c.SlowLogGet(bg, 1024).Result()
	require.NoError(t, err)
	var denials, admissions []time.Duration
	for _, l := range logs {
		if len(l.Args) < 4 || !strings.EqualFold(l.Args[0], "evalsha") {
			continue
		}
		if strings.Contains(l.Args[3], "{big}") {
			denials = append(denials, l.Duration)
		} else {
			admissions = append(admissions, l.Duration)
		}
	}
	require.Len(t, denials, 20)
	require.Len(t, admissions, 20)
	slices.Sort(denials)
	slices.Sort(admissions)
	med, ref := denials[len(denials)/2], admissions[len(admissions)/2]
	t.Logf("SLOWLOG at %d requests in the log: median denial %v (slowest %v); median admission on an empty log %v",
		n, med, denials[len(denials)-1], ref)
	// Against the admission measured beside it, not a time: a Redis
	// sharing busy CPUs takes longer for both. The median is what a
	// preempted call or two cannot stretch. A denial that read the log
	// would cost a thousand times an admission (40 to 75 ms); the binary
	// search, about two or three.
	assert.LessOrEqual(t, med, 10*ref, "a denial costs Redis no more than a few lookups")
}

// The retry-after of a log denial is when enough weight has left, weights
// of any size: the binary search finds the same request a walk from the
// oldest does.
func TestSlidingLogRetryWithWeights(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s, err := New(c, Options{})
	require.NoError(t, err)
	lim := limit.Per(20, time.Hour).WithAlgorithm(limit.SlidingWindowLog)
	k := redisKey(s.prefix, lim, "w")
	weights := []int64{3, 1, 4, 1, 5, 2, 2, 1, 1} // 20 in all
	for _, w := range weights {
		d, err := s.AllowN(bg, "w", lim, w)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	members, err := c.ZRangeWithScores(bg, k, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, members, len(weights))
	for n := int64(1); n <= 20; n++ {
		d, err := s.AllowN(bg, "w", lim, n)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		// Walk from the oldest until n fits.
		left, want := int64(20), time.Duration(0)
		for i, w := range weights {
			left -= w
			if left+n <= 20 {
				want = time.Duration(int64(members[i].Score)+int64(time.Hour/time.Microsecond)-d.Now/1000) * time.Microsecond
				break
			}
		}
		assert.Equal(t, want, d.RetryAfter, "n=%d", n)
	}
}

// On a Cluster every master is asked: one that can evict is enough.
func TestMaxmemoryPolicyOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s, err := New(cl.Client(t), Options{})
	require.NoError(t, err)
	p, err := s.MaxmemoryPolicy(bg)
	require.NoError(t, err)
	assert.Equal(t, "noeviction", p)
	_, err = cl.Masters()[1].Do("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	require.NoError(t, err)
	p, err = s.MaxmemoryPolicy(bg)
	require.NoError(t, err)
	assert.Equal(t, "allkeys-lru", p)
}

// Ping loads every script, in one round trip, under the hashes the calls
// use (go-redis's Script.Load on a pipeline would set each hash empty).
func TestPingLoadsEveryScript(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s, err := New(c, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Ping(bg))
	for i, sc := range s.scripts.all() {
		require.NotEmpty(t, sc.Hash(), "script %d", i)
		ok, err := sc.Exists(bg, c).Result()
		require.NoError(t, err)
		assert.Equal(t, []bool{true}, ok, "script %d", i)
	}
	assert.Len(t, sources(), len(s.scripts.all()))
}
