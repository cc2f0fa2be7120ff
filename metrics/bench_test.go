package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/observe"
)

// The observer runs on every request's goroutine: it must not allocate once
// a rule, a source and a client have been seen.
func TestObserveDoesNotAllocate(t *testing.T) {
	r, _ := newRecorder(t, Options{})
	lim := limit.PerSecond(10)
	check := observe.CheckEvent{Rule: "per_ip", Decision: decision(hybrid.Local, true, 0, lim), Latency: 120 * time.Nanosecond}
	passed := observe.RequestEvent{Outcome: observe.Passed, Client: "ip:203.0.113.7", Latency: time.Microsecond}
	limited := observe.RequestEvent{Outcome: observe.Limited, Rule: "per_ip", Client: "ip:203.0.113.7", Latency: time.Microsecond}
	r.ObserveCheck(check)
	r.ObserveRequest(limited)
	assert0 := func(name string, f func()) {
		t.Helper()
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
	assert0("ObserveCheck", func() { r.ObserveCheck(check) })
	assert0("ObserveRequest passed", func() { r.ObserveRequest(passed) })
	assert0("ObserveRequest limited, a client held", func() { r.ObserveRequest(limited) })
}

func BenchmarkObserveCheck(b *testing.B) {
	lim := limit.PerSecond(10)
	ev := observe.CheckEvent{Rule: "per_ip", Decision: decision(hybrid.Local, true, 0, lim), Latency: 120 * time.Nanosecond}
	b.Run("serial", func(b *testing.B) {
		r, _ := newRecorder(b, Options{})
		b.ReportAllocs()
		for b.Loop() {
			r.ObserveCheck(ev)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		r, _ := newRecorder(b, Options{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.ObserveCheck(ev)
			}
		})
	})
	b.Run("parallel, 20 rules", func(b *testing.B) {
		r, _ := newRecorder(b, Options{})
		evs := make([]observe.CheckEvent, 20)
		for i := range evs {
			evs[i] = ev
			evs[i].Rule = fmt.Sprintf("endpoint:GET /api/v1/r%d", i)
			evs[i].Decision.Source = hybrid.Source(i % 3)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				r.ObserveCheck(evs[i%len(evs)])
				i++
			}
		})
	})
}

func BenchmarkObserveRequest(b *testing.B) {
	b.Run("passed", func(b *testing.B) {
		r, _ := newRecorder(b, Options{})
		ev := observe.RequestEvent{Outcome: observe.Passed, Client: "ip:203.0.113.7", Latency: time.Microsecond}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.ObserveRequest(ev)
			}
		})
	})
	for _, labels := range []struct {
		name string
		opts Options
	}{{"hashed labels (the default)", Options{}}, {"plain labels", Options{ClientLabel: PlainClientLabel}}} {
		b.Run("limited, 100 clients held, "+labels.name, func(b *testing.B) {
			r, _ := newRecorder(b, labels.opts)
			evs := make([]observe.RequestEvent, DefaultTopClients)
			for i := range evs {
				evs[i] = observe.RequestEvent{Outcome: observe.Limited, Rule: "per_ip", Client: fmt.Sprintf("ip:203.0.113.%d", i)}
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					r.ObserveRequest(evs[i%len(evs)])
					i++
				}
			})
		})
	}
	b.Run("limited, clients churning", func(b *testing.B) {
		// Every limited request a new client: each evicts the least recent
		// and creates a series. The worst case, under a spread-out attack.
		r, _ := newRecorder(b, Options{})
		evs := make([]observe.RequestEvent, 10*DefaultTopClients)
		for i := range evs {
			evs[i] = observe.RequestEvent{Outcome: observe.Limited, Rule: "per_ip", Client: fmt.Sprintf("ip:198.51.%d.%d", i/256, i%256)}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r.ObserveRequest(evs[i%len(evs)])
			i++
		}
	})
}

// BenchmarkScrape is one Gather of a Recorder that has seen 20 rules, all
// sources and 100 clients, with a local limiter of 10,000 keys watched.
func BenchmarkScrape(b *testing.B) {
	r, reg := newRecorder(b, Options{})
	l, err := hybrid.New(hybrid.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close(bg) })
	if err := r.Watch(l); err != nil {
		b.Fatal(err)
	}
	for i := range 10_000 {
		if _, err := l.Allow(bg, fmt.Sprintf("k%d", i), hybrid.PerSecond(10)); err != nil {
			b.Fatal(err)
		}
	}
	lim := limit.PerSecond(10)
	for i := range 20 {
		for s := range 3 {
			r.ObserveCheck(observe.CheckEvent{Rule: fmt.Sprintf("rule-%d", i), Decision: decision(hybrid.Source(s), true, 1, lim)})
		}
	}
	for i := range DefaultTopClients {
		r.ObserveRequest(observe.RequestEvent{Outcome: observe.Limited, Rule: "rule-0", Client: fmt.Sprintf("c%d", i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
