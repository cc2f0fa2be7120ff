package hybrid

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// keyKindPrefix is what every key of these tests starts with.
const keyKindPrefix = "kk:"

var (
	hashTag  = regexp.MustCompile(`\{[^}]*\}`)
	limitTag = regexp.MustCompile(`\d+/[0-9a-zµ.]+(/\d+)?`)
)

// keyKind is a key's kind: its name with the key and the limit taken out.
func keyKind(k string) string {
	return limitTag.ReplaceAllString(hashTag.ReplaceAllString(k, "{}"), "<limit>")
}

// scanKinds returns every key srv holds, by kind.
func scanKinds(t *testing.T, srv *redistest.Server) map[string][]string {
	t.Helper()
	kinds := map[string][]string{}
	cursor := "0"
	for {
		v, err := srv.Do("SCAN", cursor, "COUNT", 1000)
		require.NoError(t, err)
		page := v.([]any)
		cursor = page[0].(string)
		for _, k := range page[1].([]any) {
			kinds[keyKind(k.(string))] = append(kinds[keyKind(k.(string))], k.(string))
		}
		if cursor == "0" {
			return kinds
		}
	}
}

// kindLimits are the limits each mode's run decides, one key each, every
// algorithm the mode takes.
func kindLimits(mode Mode) map[string]Limit {
	// Per node about a request a millisecond on each: the pair asks each
	// key for more than its limit, so in Async mode every key is contested.
	m := map[string]Limit{
		"tb":  Per(600, time.Second),
		"lb":  Per(600, time.Second).WithAlgorithm(LeakyBucket),
		"fw":  Per(1000, time.Hour).WithAlgorithm(FixedWindow),
		"swc": Per(1000, time.Hour).WithAlgorithm(SlidingWindowCounter),
	}
	if mode == Sync {
		m["swl"] = Per(600, time.Second).WithAlgorithm(SlidingWindowLog)
	}
	return m
}

// keyKindRun is a short run of mode on srv: two nodes deciding every
// algorithm the mode takes on a key each, and a hot key under pressure
// (Async: contested, its shares in Redis, with the ledger on).
type keyKindRun struct {
	nodes []*Limiter
	logs  []*logged
	mode  Mode
}

func startKeyKindRun(t *testing.T, srv *redistest.Server, mode Mode) *keyKindRun {
	t.Helper()
	r := &keyKindRun{mode: mode}
	for i := range 2 {
		log, h := newLogger()
		c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		l, err := New(Config{Redis: c, Prefix: keyKindPrefix, Mode: mode, Logger: log, Node: fmt.Sprint("n", i),
			SyncInterval: 10 * time.Millisecond, RedisTimeout: 2 * time.Second, FleetSize: 2, Ledger: mode == Async})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close(bg) })
		r.nodes, r.logs = append(r.nodes, l), append(r.logs, h)
	}
	return r
}

// decide runs the workload for d; every decision must come back.
func (r *keyKindRun) decide(t *testing.T, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, l := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				for name, lim := range kindLimits(r.mode) {
					_, err := l.Allow(bg, "k-"+name, lim)
					assert.NoError(t, err, "a decision on k-%s comes back", name)
				}
				_, err := l.AllowN(bg, "hot", PerSecond(50).WithBurst(50), 1) // more than the pair's limit: pressure
				assert.NoError(t, err, "a decision on the hot key comes back")
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// faults counts every fault of a key the nodes counted.
func (r *keyKindRun) faults() (n uint64) {
	for _, l := range r.nodes {
		st := l.Stats()
		n += st.Faults.KeyFaults + st.Reconcile.KeyFaults + st.Reconcile.Shares.Faults
	}
	return n
}

// faultLogs returns the log lines about a value of another type: those that
// say so, or carry Redis's WRONGTYPE.
func (r *keyKindRun) faultLogs() []string {
	var out []string
	for i, h := range r.logs {
		h.mu.Lock()
		for _, rec := range h.recs {
			about := strings.Contains(rec.msg, "another type") || strings.Contains(rec.msg, "refuses")
			for _, v := range rec.attrs {
				about = about || strings.Contains(v, "WRONGTYPE")
			}
			if about {
				out = append(out, fmt.Sprintf("node %d: %s key=%s", i, rec.msg, rec.attrs["key"]))
			}
		}
		h.mu.Unlock()
	}
	return out
}

// wrongType overwrites k with a value of another type than it holds, in
// one script: the running limiter cannot make the key again in between.
func wrongType(t *testing.T, srv *redistest.Server, k string) string {
	t.Helper()
	typ, err := srv.Do("EVAL", `local t = redis.call('TYPE', KEYS[1]).ok
redis.call('DEL', KEYS[1])
if t == 'string' then redis.call('HSET', KEYS[1], 'not', 'yours') else redis.call('SET', KEYS[1], 'not yours') end
return t`, 1, k)
	require.NoError(t, err)
	if typ == "string" {
		return "string -> hash"
	}
	return fmt.Sprint(typ) + " -> string"
}

// Every kind of key the limiter makes, found by SCAN after a short run of
// each mode (so a renamed or new key cannot slip past), overwritten with a
// value of another type: the fault is counted and logged once, and every
// decision still comes back.
func TestEveryKeyKindsWrongTypeIsLoggedAndCounted(t *testing.T) {
	for _, mode := range []Mode{Sync, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel() // each mode its own redis-server; most of the time is spent waiting for keys to appear
			srv := redistest.Start(t)
			discover := startKeyKindRun(t, srv, mode)
			// Every kind seen while the nodes run (their heartbeats too),
			// over 1.5 s: Async makes a key's shares when it is contested.
			kinds := map[string][]string{}
			for range 15 {
				discover.decide(t, 100*time.Millisecond)
				for k, keys := range scanKinds(t, srv) {
					kinds[k] = append(kinds[k], keys...)
				}
			}
			for _, l := range discover.nodes {
				require.NoError(t, l.Close(bg))
			}
			for name := range kindLimits(mode) {
				found := false
				for _, keys := range kinds {
					for _, k := range keys {
						found = found || strings.Contains(k, "{k-"+name+"}")
					}
				}
				require.True(t, found, "the run made a key for k-%s: %v", name, kinds)
			}
			names := make([]string, 0, len(kinds))
			for k := range kinds {
				names = append(names, k)
			}
			sort.Strings(names)
			t.Logf("%d key kinds after a short %v run: %s", len(names), mode, strings.Join(names, "  "))
			require.NotEmpty(t, names)
			for _, kind := range names {
				t.Run(strings.ReplaceAll(kind, "/", "|"), func(t *testing.T) {
					srv.Flush()
					r := startKeyKindRun(t, srv, mode)
					var keys []string
					for range 50 {
						if r.decide(t, 100*time.Millisecond); len(scanKinds(t, srv)[kind]) > 0 {
							break
						}
					}
					keys = scanKinds(t, srv)[kind]
					require.NotEmpty(t, keys, "the run makes this kind again within 5 s")
					var how []string
					for _, k := range keys {
						how = append(how, k+": "+wrongType(t, srv, k))
					}
					slices.Sort(how)
					before := r.faults()
					r.decide(t, 400*time.Millisecond)
					logs := r.faultLogs()
					t.Logf("%s; faults counted %d; logged:\n  %s", strings.Join(how, ", "), r.faults()-before, strings.Join(logs, "\n  "))
					assert.Greater(t, r.faults(), before, "the fault is counted (Stats().Faults.KeyFaults, Reconcile.KeyFaults or Reconcile.Shares.Faults)")
					assert.NotEmpty(t, logs, "the fault is logged")
					seen := map[string]int{}
					for _, l := range logs {
						seen[l]++
					}
					for l, n := range seen {
						assert.Equal(t, 1, n, "logged once: %s", l)
					}
					ctx, cancel := context.WithTimeout(bg, 2*time.Second)
					defer cancel()
					for _, l := range r.nodes {
						_ = l.Close(ctx)
					}
				})
			}
		})
	}
}
