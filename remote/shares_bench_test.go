package remote

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// redisCPU returns the CPU time Redis has used so far, in µs (INFO cpu:
// user and system): what a call costs it, the command's reading and
// writing included, and unlike commandstats' wall time, not inflated by a
// machine whose other processes take the CPU.
func redisCPU(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(bg, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
				s, _ := strconv.ParseFloat(v, 64)
				total += s * 1e6
			}
		}
	}
	return total
}

// BenchmarkShareOps is what one share op costs Redis (redis-cpu-µs/op:
// the CPU time Redis used per op, as INFO cpu counts it), beside a PING
// (what any round trip costs it: the floor) and one Sync decision on
// the same server: a request the pool serves (a key too small to split),
// with only its own record in the hash and with six nodes' records, and the
// renewal of a grant in a contest four nodes hold. Async must cost Redis no
// more than Sync where every request needs the store.
//
//	go test -run '^$' -bench ShareOps ./remote/
func BenchmarkShareOps(b *testing.B) {
	c := benchClient(b)
	stores := make([]*Store, 6)
	for i := range stores {
		s, err := New(c, Options{Node: fmt.Sprintf("n%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Ping(bg); err != nil {
			b.Fatal(err)
		}
		stores[i] = s
	}
	set := share.Settings{Lease: 1_000_000, CallWindow: 40_000, Cooldown: 200_000, Recovery: 1_000_000}
	tiny := limit.PerSecond(1_000_000_000).WithBurst(1) // pooled over six nodes, never short of room
	seq := int64(1)
	op := func(s *Store, o share.Op) share.Reply {
		seq++
		o.Seq = seq
		var r [1]share.Reply
		if err := s.ShareOps(bg, set, []share.Op{o}, r[:]); err != nil || r[0].Err != nil {
			b.Fatal(err, r[0].Err)
		}
		return r[0]
	}
	serve := func(key string) share.Op {
		return share.Op{Key: key, Limit: tiny, Want: 1, Serve: true, Fleet: 6, Pooled: true, Full: -1, Shadow: -1}
	}
	measure := func(b *testing.B, do func()) {
		before := redisCPU(b, c)
		n := 0
		for b.Loop() {
			do()
			n++
		}
		b.ReportMetric((redisCPU(b, c)-before)/float64(n), "redis-cpu-µs/op")
	}

	b.Run("ping", func(b *testing.B) {
		// The floor: what any round trip costs Redis on this machine (its
		// reading and answering a call), whatever the call does.
		measure(b, func() {
			if err := c.Ping(bg).Err(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("sync-decision", func(b *testing.B) {
		measure(b, func() {
			if _, err := stores[0].AllowN(bg, "sync", tiny, 1); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("serve/records=1", func(b *testing.B) {
		o := serve("serve1")
		r := op(stores[0], o)
		o.Epoch = r.Epoch
		measure(b, func() { op(stores[0], o) })
	})
	b.Run("serve/records=6", func(b *testing.B) {
		o := serve("serve6")
		var r share.Reply
		for _, s := range stores {
			r = op(s, o)
		}
		o.Epoch = r.Epoch
		measure(b, func() { op(stores[0], o) })
	})
	b.Run("renew/records=4", func(b *testing.B) {
		lim := limit.PerSecond(1_000_000)
		base := share.Op{Key: "renew", Limit: lim, Fleet: 4, Full: -1, Shadow: -1, Want: 1}
		grants := make([]int64, 4)
		var epoch int64
		for i, s := range stores[:4] {
			o := base
			o.Epoch, o.Join, o.Need = epoch, i > 0, share.One/4
			if i > 0 {
				o.Held, o.Keep = share.Even(4), share.Even(4)
			}
			r := op(s, o)
			epoch, grants[i] = r.Epoch, r.Grant
		}
		o := base
		o.Epoch, o.Want, o.Held, o.Keep, o.Need = epoch, 0, grants[0], grants[0], grants[0]
		measure(b, func() { op(stores[0], o) })
	})
}

// BenchmarkRegistry is what a heartbeat costs Redis (redis-cpu-µs/beat):
// one that reads nothing, one that reads fifty changes (per-client keys'
// contests, as every node of a fleet reads every change made), and one
// that registers ten contests, quietly or not. The difference between the
// first two, over fifty, is the reading of one change.
//
//	go test -run '^$' -bench Registry ./remote/
func BenchmarkRegistry(b *testing.B) {
	c := benchClient(b)
	writer, err := New(c, Options{Prefix: "rb:", Node: "w"})
	if err != nil {
		b.Fatal(err)
	}
	reader, err := New(c, Options{Prefix: "rb:", Node: "r"})
	if err != nil {
		b.Fatal(err)
	}
	var r share.BeatReply
	if err := reader.ShareBeat(bg, &share.Beat{}, &r); err != nil {
		b.Fatal(err)
	}
	from := r.Next
	bt := &share.Beat{From: math.MaxInt64}
	// Expiries far ahead of the store's clock (µs): an entry already
	// expired is removed by the beat that writes it.
	for i := range 50 {
		bt.Contests = append(bt.Contests, share.Contest{Key: "k" + strconv.Itoa(i), Limit: perClient, Epoch: 1, Expiry: 1 << 51})
	}
	if err := writer.ShareBeat(bg, bt, &r); err != nil {
		b.Fatal(err)
	}
	measure := func(b *testing.B, beat func()) {
		before, iters := redisCPU(b, c), 0
		for b.Loop() {
			beat()
			iters++
		}
		b.ReportMetric((redisCPU(b, c)-before)/float64(iters), "redis-cpu-µs/beat")
	}
	for _, read := range []int{0, 50} {
		b.Run(fmt.Sprintf("reads=%d", read), func(b *testing.B) {
			f := int64(math.MaxInt64)
			if read > 0 {
				f = from
			}
			measure(b, func() {
				if err := reader.ShareBeat(bg, &share.Beat{From: f, Limit: 1000, GoneKeep: 21_000_000}, &r); err != nil {
					b.Fatal(err)
				}
				if len(r.Changes) != read {
					b.Fatalf("read %d changes, want %d", len(r.Changes), read)
				}
			})
		})
	}
	n := 100
	for _, quiet := range []bool{false, true} {
		b.Run(fmt.Sprintf("registers=10/quiet=%v", quiet), func(b *testing.B) {
			measure(b, func() {
				bt := &share.Beat{From: math.MaxInt64, GoneKeep: 21_000_000} // reads nothing
				for range 10 {
					n++
					bt.Contests = append(bt.Contests, share.Contest{Key: "k" + strconv.Itoa(n), Limit: perClient, Epoch: 1, Expiry: 1 << 51, Quiet: quiet})
				}
				if err := writer.ShareBeat(bg, bt, &r); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
