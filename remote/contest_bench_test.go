package remote

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/limit"
)

// The throughput of Async mode's scripts on one Redis: share reports of
// contested keys (contest.lua), ledger entries of keys decided alone
// (ledger.lua) and heartbeats (fleet.lua). Each reports, besides ns/op, the
// items applied per second and the Redis CPU each costs (INFO cpu, user +
// sys, over the benchmark):
//
//	go test -run '^$' -bench 'Contest|Ledger|Heartbeat' -count 6 ./remote/

// redisCPU is Redis's user + sys CPU so far.
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(bg, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(info, "\n") {
		name, val, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			v, _ := strconv.ParseFloat(val, 64)
			sum += v
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// throughput reports items/s and Redis CPU per item over a benchmark that
// applied items in total since start, when Redis's CPU was cpu0.
func throughput(b *testing.B, c *redis.Client, unit string, items int, start time.Time, cpu0 time.Duration) {
	b.ReportMetric(float64(items)/time.Since(start).Seconds(), unit+"/s")
	b.ReportMetric(float64(redisCPU(b, c)-cpu0)/float64(time.Microsecond)/float64(items), "redis-µs/"+unit)
}

// BenchmarkContest: four nodes report every key of a batch, in turn, as a
// contested key's holders do when they report it (new spend, the last
// answer applied, the fleet acked): the steady state of a key under
// pressure. One pipeline per batch.
func BenchmarkContest(b *testing.B) {
	c := benchClient(b)
	const nodes = 4
	stores := make([]*Store, nodes)
	for i := range stores {
		var err error
		if stores[i], err = New(c, Options{Node: fmt.Sprintf("n%d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	if err := stores[0].Ping(bg); err != nil {
		b.Fatal(err)
	}
	lim := limit.PerSecond(10).WithBurst(10)
	for _, size := range []int{1, 100, 1000, 2000} {
		reps := make([][]ShareReport, nodes)
		for n := range reps {
			reps[n] = make([]ShareReport, size)
			for i := range reps[n] {
				reps[n][i] = ShareReport{Key: fmt.Sprintf("user:%d:%d", size, i), Limit: lim, Grant: GrantOne / nodes,
					Demand: 10, Epoch: 1, Claim: n == 0}
			}
		}
		var round ShareRound
		send := func(n int) {
			now := time.Now().UnixNano()
			rs := reps[n]
			for i := range rs {
				rs[i].Total++ // new spend every report, as in use
				rs[i].Now = now
				rs[i].State = limit.State{TAT: now}
			}
			round = ShareRound{Fleet: nodes, Acked: now, Answers: round.Answers}
			if err := stores[n].Contest(bg, rs, &round); err != nil {
				b.Fatal(err)
			}
			for i, a := range round.Answers {
				if a.Err != nil {
					b.Fatal(a.Err)
				}
				rs[i].Grant, rs[i].Applied, rs[i].Acked, rs[i].Claim = a.Grant, a.Seq, rs[i].Total, false
			}
		}
		for n := range nodes {
			send(n) // every node holds a record: the steady state
		}
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			cpu0, start := redisCPU(b, c), time.Now()
			n := 0
			for b.Loop() {
				send(n % nodes)
				n++
			}
			throughput(b, c, "reports", n*size, start, cpu0)
		})
	}
}

// BenchmarkLedger: one node adds new spend to the ledgers of a batch of keys
// it decided alone, as it does for keys that leave its memory and when it
// closes. One pipeline per batch.
func BenchmarkLedger(b *testing.B) {
	c := benchClient(b)
	s, err := New(c, Options{Node: "n0"})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Ping(bg); err != nil {
		b.Fatal(err)
	}
	lim := limit.PerSecond(10).WithBurst(10)
	for _, size := range []int{1, 100, 1000, 2000} {
		entries := make([]LedgerEntry, size)
		for i := range entries {
			entries[i] = LedgerEntry{Key: fmt.Sprintf("user:%d:%d", size, i), Limit: lim, Epoch: 1}
		}
		errs := make([]error, size)
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			cpu0, start := redisCPU(b, c), time.Now()
			n := 0
			for b.Loop() {
				for i := range entries {
					entries[i].Acked = entries[i].Total
					entries[i].Total += 3
				}
				if err := s.AddToLedgers(bg, entries, errs); err != nil {
					b.Fatal(err)
				}
				n++
			}
			throughput(b, c, "entries", n*size, start, cpu0)
		})
	}
}

// BenchmarkHeartbeat: one node's heartbeat in a fleet of four, bringing
// back claims changed since its last one: none, and 20 (a fleet renewing a
// few hundred contested keys, seen every 20 ms).
func BenchmarkHeartbeat(b *testing.B) {
	c := benchClient(b)
	const nodes = 4
	stores := make([]*Store, nodes)
	for i := range stores {
		var err error
		if stores[i], err = New(c, Options{Node: fmt.Sprintf("n%d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	if err := stores[0].Ping(bg); err != nil {
		b.Fatal(err)
	}
	lim := limit.PerSecond(10).WithBurst(10)
	for _, changed := range []int{0, 20} {
		b.Run(fmt.Sprintf("changed=%d", changed), func(b *testing.B) {
			var from int64
			cpu0, start := redisCPU(b, c), time.Now()
			n := 0
			for b.Loop() {
				// Another node renews changed claims; node 0 beats and learns them.
				if changed > 0 {
					claims := make([]Claim, changed)
					exp := time.Now().Add(time.Minute).UnixNano()
					for i := range claims {
						claims[i] = Claim{Key: fmt.Sprintf("hot:%d", (n*changed+i)%500), Limit: lim, Expiry: exp}
					}
					if err := stores[1+n%(nodes-1)].Beat(bg, &Heartbeat{Mark: MaxMark, Claims: claims}); err != nil {
						b.Fatal(err)
					}
				}
				hb := &Heartbeat{Mark: MaxMark, From: from, Limit: 1000}
				if err := stores[0].Beat(bg, hb); err != nil {
					b.Fatal(err)
				}
				if len(hb.Changed) != changed && n > 0 {
					b.Fatalf("%d claims changed, want %d", len(hb.Changed), changed)
				}
				from = hb.Next
				n++
			}
			beats := n
			if changed > 0 {
				beats *= 2 // the renewing node's and node 0's
			}
			throughput(b, c, "beats", beats, start, cpu0)
		})
	}
}
