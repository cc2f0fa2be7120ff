package main

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/bench/contender"
	"github.com/hybridlimit/hybridlimit/bench/keyload"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
	"github.com/hybridlimit/hybridlimit/internal/workload"
)

func keysTestOptions(keysOnly bool) options {
	o := options{nodes: 4, keysOnly: keysOnly, only: regexp.MustCompile("")}
	o.many = keysOptions{keys: 1000, zipf: 1.1, rate: 2000, policy: contender.Policy{Rate: 10, Burst: 10},
		warmup: time.Second, duration: 2 * time.Second, history: time.Minute, interval: 20 * time.Millisecond, timeout: time.Second,
		workers: 64, drain: time.Second, only: workloadIDs,
		client: clientOptions{nodes: 6, keys: 5000, zipf: 1.2, rate: 2000, policy: contender.Policy{Rate: 1, Burst: 1}},
		hot:    hotOptions{nodes: 4, policy: contender.Policy{Rate: 1000, Burst: 100}, over: 2},
		idle:   idleOptions{nodes: 4, burst: time.Second, rest: 5 * time.Second}}
	return o
}

func names(cs []contender.Contender) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// bench-compare runs W1 with every contender that keeps its state in Redis;
// bench-keys runs every workload with our Async and Sync, Async first, and
// the peers on W1 only when asked.
func TestKeysContenders(t *testing.T) {
	full := keysTestOptions(false)
	ws := keysWorkloads(full)
	if len(ws) != 1 || ws[0].id != "w1" {
		t.Fatalf("bench-compare runs %v, want W1 alone", ws)
	}
	got := names(keysContenders(full, ws[0], contender.All()))
	for _, want := range []string{"hybridlimit Sync", "hybridlimit Async 20ms", "go-redis/redis_rate", "ulule/limiter redis", "throttled GCRA goredisstore"} {
		if !slices.Contains(got, want) {
			t.Errorf("bench-compare's many keys lacks %s: %v", want, got)
		}
	}
	for _, c := range keysContenders(full, ws[0], contender.All()) {
		if !c.Distributed {
			t.Errorf("%s keeps no state in Redis", c.Name)
		}
	}

	keys := keysTestOptions(true)
	ws = keysWorkloads(keys)
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.id)
	}
	if !slices.Equal(ids, workloadIDs) {
		t.Errorf("bench-keys runs %v, want %v", ids, workloadIDs)
	}
	for _, w := range ws {
		if got := names(keysContenders(keys, w, contender.All())); !slices.Equal(got, []string{"hybridlimit Async 20ms", "hybridlimit Sync"}) {
			t.Errorf("%s: %v, want our Async then Sync", w.id, got)
		}
	}
	keys.many.peers = true
	if got := keysContenders(keys, ws[0], contender.All()); len(got) != 6 || got[0].Name != "hybridlimit Async 20ms" {
		t.Errorf("W1 with -keys-peers: %v", names(got))
	}
	if got := keysContenders(keys, ws[1], contender.All()); len(got) != 2 {
		t.Errorf("%s with -keys-peers: %v, want ours only", ws[1].id, names(got))
	}

	keys.many.only = []string{"idle", "pinned"}
	if ws := keysWorkloads(keys); len(ws) != 2 || ws[0].id != "pinned" || ws[1].id != "idle" {
		t.Errorf("-keys-workloads idle,pinned: %v", ws)
	}
	if _, err := parseWorkloads("w1,nope"); err == nil {
		t.Error("an unknown workload: no error")
	}
	if got, err := parseWorkloads(" w1, idle ,"); err != nil || !slices.Equal(got, []string{"w1", "idle"}) {
		t.Errorf("parsed %v, %v", got, err)
	}
}

// Each workload is what its title says.
func TestKeysWorkloadsAreTheIssuesOnes(t *testing.T) {
	byID := map[string]keysWorkload{}
	for _, w := range keysWorkloads(keysTestOptions(true)) {
		byID[w.id] = w
	}
	for id, want := range map[string]keyload.Spec{
		"w1":         {Nodes: 4, Keys: 1000, Zipf: 1.1, Rate: 2000, Routing: keyload.Random},
		"pinned":     {Nodes: 6, Keys: 5000, Zipf: 1.2, Rate: 2000, Routing: keyload.Pinned},
		"roundrobin": {Nodes: 6, Keys: 5000, Zipf: 1.2, Rate: 2000, Routing: keyload.RoundRobin},
		"random":     {Nodes: 6, Keys: 5000, Zipf: 1.2, Rate: 2000, Routing: keyload.Random},
		"hotkey":     {Nodes: 4, Keys: 1, Rate: 2000, Routing: keyload.Random},
		"bursts":     {Nodes: 4, Keys: 1000, Zipf: 1.1, Rate: 2000, Routing: keyload.Pinned, Clump: 10},
		"idle":       {Nodes: 4, Keys: 1000, Zipf: 1.1, Rate: 2000, Routing: keyload.Random},
	} {
		got := byID[id].spec
		got.Seed = 0
		if got != want {
			t.Errorf("%s: %+v, want %+v", id, got, want)
		}
	}
	if p := byID["pinned"].policy; p != (contender.Policy{Rate: 1, Burst: 1}) {
		t.Errorf("per-client limit %v", p)
	}
	if !byID["idle"].idle || byID["w1"].idle {
		t.Error("the idle workload is the idle one")
	}
}

// The probe sees every wait of our limiter: a burst on one node of two
// past its even split waits on the fleet, and no decision whose Source is
// Remote went unwatched; the first decision, made from memory, did not
// watch its context. If a change made a wait that does not watch ctx, the
// share "from memory" would be overstated: this fails first.
func TestWaitProbe(t *testing.T) {
	srv, err := redisproc.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	env := contender.Env{Addr: srv.Addr(), Prefix: "probe:", RedisTimeout: time.Second}
	policy := contender.Policy{Rate: 1, Burst: 10} // nothing refills during the test
	c := contender.HybridAsync(20 * time.Millisecond)
	var nodes []contender.Hybrid
	for range 2 {
		l, err := c.New(env, policy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		nodes = append(nodes, l.(contender.Hybrid))
	}
	for deadline := time.Now().Add(10 * time.Second); nodes[0].Stats().Reconcile.Nodes < 2 || nodes[1].Stats().Reconcile.Nodes < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the two nodes never saw each other")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx := context.Background()
	waited := 0
	for i := range policy.Burst {
		d, watched, err := decideProbed(ctx, nodes[0], "k")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && (watched || d.Source != hybrid.Local || !d.Allowed) {
			t.Fatalf("a new key's first request: watched %v, %+v: want admitted from memory", watched, d)
		}
		if d.Source == hybrid.Remote && !watched {
			t.Errorf("request %d: Source Remote, its context never watched", i)
		}
		if watched {
			waited++
		}
	}
	if waited == 0 {
		t.Error("a burst of 10 on one node of two (even split 5) never waited on the fleet")
	}

	var sync contender.Contender
	for _, c := range contender.All() {
		if c.Name == "hybridlimit Sync" {
			sync = c
		}
	}
	s, err := sync.New(env, policy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	n, ours := asNode(s)
	ans, err := n(ctx, "s")
	if err != nil || !ours || !ans.Waited || ans.Source != keyload.Remote {
		t.Errorf("a Sync decision: %+v, %v (ours %v): want one that waited on Redis", ans, err, ours)
	}
}

// The share from memory is the decisions the driver counted as such (Source
// Local, not waited) over those made; a peer's decisions do not say.
func TestFromMemory(t *testing.T) {
	r := &keysRun{ours: true, res: &keyload.Result{Decided: 1000, FromMemory: 850}}
	if got, ok := r.fromMemory(); !ok || got != 0.85 {
		t.Errorf("ours: %v, %v", got, ok)
	}
	r.ours = false
	if _, ok := r.fromMemory(); ok {
		t.Error("a peer's share from memory was given")
	}
}

// fakeKeysRun is a run whose figures are round: 10,000 decisions of 10,000
// offered, Redis 0.1 s of CPU and 20,000 commands over 10 s.
func fakeKeysRun(c contender.Contender, ours bool, remote int64, asks uint64) *keysRun {
	res := &keyload.Result{Offered: 10_000, Decided: 10_000, Answered: 10_000, Admitted: 4_000, Elapsed: 10 * time.Second}
	res.Sources[keyload.Local] = 10_000 - remote
	res.Sources[keyload.Remote] = remote
	res.Waited = remote + int64(asks)/2 // half the asks were re-asks
	res.FromMemory = 10_000 - res.Waited
	for i := range 10_000 {
		res.Latency.Record(time.Duration(i+1) * time.Microsecond)
		res.Service.Record(time.Microsecond)
	}
	return &keysRun{c: c, ours: ours, asks: asks, nodes: 4, res: res, window: 10 * time.Second,
		redis: workload.RedisCost{CPU: 100 * time.Millisecond, Calls: 20_000, Scripts: 10_000},
		acc:   keyload.Accuracy{Decided: 10_000, Admitted: 4_000, Exact: 4_100, Over: 20, OverKeys: 2, Under: 120, UnderKeys: 30}}
}

// The report puts Async and Sync side by side for every workload: Redis
// CPU a decision, p99, the share from memory, the first requests; then a
// table a workload; a percentile among unanswered requests says so.
func TestKeysReport(t *testing.T) {
	o := keysTestOptions(true)
	var rs []*keysResult
	for _, w := range keysWorkloads(o) {
		s, err := keyload.Generate(w.spec, time.Second, 0, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		kr := &keysResult{w: w, stream: s}
		for _, c := range keysContenders(o, w, contender.All()) {
			var r *keysRun
			if c.Interval != 0 {
				r = fakeKeysRun(c, true, 100, 2_800) // 85% from memory
			} else {
				r = fakeKeysRun(c, true, 10_000, 0)
			}
			if w.idle {
				r.idle = &idleCost{first: workload.RedisCost{Calls: 800, CPU: 40 * time.Millisecond}, firstFor: time.Second,
					rest: workload.RedisCost{Calls: 3_200, CPU: 20 * time.Millisecond, ByCommand: map[string]int64{"evalsha": 1_600, "hget": 1_600}}, restFor: 4 * time.Second}
			}
			kr.runs = append(kr.runs, r)
		}
		rs = append(rs, kr)
	}
	rs[1].runs[1].res.Offered = 20_000 // pinned, Sync: half unanswered
	rs[1].runs[1].res.Shed = 10_000
	var b strings.Builder
	floor := &keyload.Result{Offered: 100, Decided: 100}
	floor.Latency.Record(5 * time.Microsecond)
	rep := report{opts: o, many: rs, floor: floor}
	if err := rep.write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"### Async and Sync side by side",
		"| w1 | **10.00 µs** | **10.00 µs** | 9.90 ms | 9.90 ms | 85.0% | 0% | 100.0% | 100.0% |",
		"| pinned | **10.00 µs** | **10.00 µs** | 9.90 ms | unanswered | 85.0% | 0% | 100.0% | 50.0% |",
		"| idle | at rest: 200.0 commands/s a node, 5.00 ms CPU/s | at rest: 200.0 commands/s a node, 5.00 ms CPU/s |",
		"| | hybridlimit Async 20ms | hybridlimit Sync |",
		"| Redis commands / decision (scripts) | 2.000 (1.000) | 2.000 (1.000) |",
		"| Redis commands / s; CPU, % of a core | 2.0k; 1.0% | 2.0k; 1.0% |",
		"| decided / offered | 10,000 / 10,000 | 10,000 / 20,000 (10,000 shed, 0 late) |",
		"| **latency** p50 / p99 / p999 | 5.01 ms / 9.90 ms / 10.00 ms |",
		"| Source local / remote / degraded; waited; asks | 99.0% / 1.0% / 0%; 15.0%; 28.0% | 0% / 100.0% / 0%; 100.0%; 0% |",
		"| admitted (exact limiter) | 40.0% (41.0%) |",
		"| over / under the exact limiter (keys) | +20 (2) / −120 (30) |",
		"| **Redis commands / s a node, at rest** | **200.0** |",
		"| the first second: commands / s a node; CPU, ms | 200.0; 40.0 |",
		"| at rest, by command (a second a node) | evalsha 100.0, hget 100.0 |",
		"at commit",
		"latency p50 / p99 / p999 5.00 µs / 5.00 µs / 5.00 µs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

func TestFmtCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 123456: "123,456", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := fmtCount(n); got != want {
			t.Errorf("fmtCount(%d) = %q, want %q", n, got, want)
		}
	}
}

// The workloads at a tiny scale, on a private redis-server: every workload
// is sent to our Async and Sync, each run decides what it was offered (the
// load is light), Redis counted work, the exact limiter saw the same
// requests, and the idle fleet's rest was measured.
func TestKeysTinyScale(t *testing.T) {
	srv, err := redisproc.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	o := keysTestOptions(true)
	o.nodes = 2
	o.many.keys, o.many.rate, o.many.warmup, o.many.duration, o.many.history = 200, 400, 200*time.Millisecond, 400*time.Millisecond, time.Second
	o.many.client = clientOptions{nodes: 3, keys: 300, zipf: 1.2, rate: 300, policy: contender.Policy{Rate: 1, Burst: 1}}
	o.many.hot = hotOptions{nodes: 2, policy: contender.Policy{Rate: 100, Burst: 10}, over: 2}
	o.many.idle = idleOptions{nodes: 2, burst: 200 * time.Millisecond, rest: 1200 * time.Millisecond}
	o.many.only = []string{"w1", "pinned", "idle"}
	rs, err := measureKeys(context.Background(), o, admin, srv.Addr(), contender.All())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("%d workloads, want 3", len(rs))
	}
	floor, err := measureFloor(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if floor.Decided != floor.Offered || floor.Offered != int64(o.many.rate*floorFor.Seconds()) {
		t.Errorf("the harness's floor: decided %d of %d, want W1's rate for %v", floor.Decided, floor.Offered, floorFor)
	}
	for _, kr := range rs {
		if len(kr.runs) != 2 || kr.async() == nil || kr.sync() == nil {
			t.Fatalf("%s: %d runs", kr.w.id, len(kr.runs))
		}
		for _, r := range kr.runs {
			name := kr.w.id + ", " + r.c.Name
			if r.res.Offered != int64(kr.stream.Offered()) || r.res.Decided != r.res.Offered {
				t.Errorf("%s: decided %d of %d (stream %d)", name, r.res.Decided, r.res.Offered, kr.stream.Offered())
			}
			if kr.w.idle {
				if kr.emptyFor < time.Second || kr.empty.Calls != 0 {
					t.Errorf("the empty Redis: %d commands over %v", kr.empty.Calls, kr.emptyFor)
				}
				if r.idle == nil || r.idle.restFor < 100*time.Millisecond {
					t.Errorf("%s: rest not measured: %+v", name, r.idle)
				}
				continue
			}
			if r.redis.Calls == 0 || r.window <= 0 {
				t.Errorf("%s: Redis counted %d commands over %v", name, r.redis.Calls, r.window)
			}
			if r.acc.Decided != r.res.Decided || r.acc.Admitted != r.res.Admitted || r.acc.Exact == 0 {
				t.Errorf("%s: exact limiter %+v against %d decided, %d admitted", name, r.acc, r.res.Decided, r.res.Admitted)
			}
			if _, ok := r.fromMemory(); !ok {
				t.Errorf("%s: no share from memory", name)
			}
		}
		if s := kr.sync(); !kr.w.idle && s.res.FromMemory != 0 {
			t.Errorf("%s: Sync answered %d from memory", kr.w.id, s.res.FromMemory)
		}
	}
}
