package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// sample is one call: when it was sent (since the load began), how long
// it took, and what came back.
type sample struct {
	at   time.Duration
	lat  time.Duration
	err  bool
	over bool
	inst int // the instance asked
}

// clients are the load's connections: one per goroutine per instance, so
// that the load is several gRPC streams, as from several Envoys.
type clients struct {
	conns []*grpc.ClientConn
	by    [][]rlsv3.RateLimitServiceClient // [goroutine][instance]
	// pinned sends each goroutine's calls to one instance only, goroutine g
	// to instance g mod n, as an Envoy sends all its calls on its one
	// connection to a rate limit service host; else each goroutine sends
	// to the instances in turn.
	pinned bool
	// route, when set, picks the instance of call i of goroutine g out of
	// n (over pinned).
	route func(g, i, n int) int
}

func dial(addrs []string, goroutines int) (*clients, error) {
	c := &clients{by: make([][]rlsv3.RateLimitServiceClient, goroutines)}
	for g := range goroutines {
		for _, a := range addrs {
			conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				c.close()
				return nil, err
			}
			c.conns = append(c.conns, conn)
			c.by[g] = append(c.by[g], rlsv3.NewRateLimitServiceClient(conn))
		}
	}
	return c, nil
}

func (c *clients) close() {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

// request builds the call number i of goroutine g.
type request func(g, i int) *rlsv3.RateLimitRequest

// descriptorRequest is a request of one descriptor key=value.
func descriptorRequest(domain, key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}}
}

// perClient spreads calls over n clients, each a value of key "client".
func perClient(n int) request {
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		reqs[i] = descriptorRequest(benchDomain, "client", "c"+strconv.Itoa(i))
	}
	return func(g, i int) *rlsv3.RateLimitRequest { return reqs[(g*7919+i)%n] }
}

// hot is every call on one shared key.
func hot() request {
	r := descriptorRequest(benchDomain, "hot", "k")
	return func(int, int) *rlsv3.RateLimitRequest { return r }
}

// drive offers rate calls per second (0: as fast as the goroutines go) for
// dur, spread over the goroutines, each goroutine sending to the instances
// in turn, and returns every call. Calls time out after timeout. A
// goroutine that falls behind its schedule skips the calls it missed
// rather than bursting to catch up, so an overloaded server shows as a
// throughput below the rate offered. With c.pinned each goroutine sends to
// one instance only.
func drive(ctx context.Context, c *clients, rate float64, dur, timeout time.Duration, mk request, onStart func(time.Time)) []sample {
	g := len(c.by)
	out := make([][]sample, g)
	start := time.Now().Add(20 * time.Millisecond)
	if onStart != nil {
		onStart(start)
	}
	end := start.Add(dur)
	var wg sync.WaitGroup
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var period time.Duration
			if rate > 0 {
				period = time.Duration(float64(time.Second) * float64(g) / rate)
			}
			// Spread the goroutines' first calls over one period.
			next := start.Add(period * time.Duration(w) / time.Duration(g))
			inst := c.by[w]
			for i := 0; ; i++ {
				if period > 0 {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
				}
				now := time.Now()
				if !now.Before(end) || ctx.Err() != nil {
					return
				}
				target := i % len(inst)
				if c.pinned {
					target = w % len(inst)
				}
				if c.route != nil {
					target = c.route(w, i, len(inst))
				}
				cctx, cancel := context.WithTimeout(ctx, timeout)
				resp, err := inst[target].ShouldRateLimit(cctx, mk(w, i))
				cancel()
				out[w] = append(out[w], sample{at: now.Sub(start), lat: time.Since(now), err: err != nil,
					over: err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT, inst: target})
				if period > 0 {
					next = next.Add(period)
					if late := time.Since(next); late > period {
						next = next.Add(late / period * period) // skip the calls missed
					}
				}
			}
		}()
	}
	wg.Wait()
	var all []sample
	for _, s := range out {
		all = append(all, s...)
	}
	slices.SortFunc(all, func(a, b sample) int { return int(a.at - b.at) })
	return all
}

// stats summarises samples.
type stats struct {
	calls, errs, over int
	p50, p99, max     time.Duration
	perSec            float64
}

func summarise(s []sample, dur time.Duration) stats {
	st := stats{calls: len(s)}
	lats := make([]time.Duration, 0, len(s))
	for _, x := range s {
		if x.err {
			st.errs++
		}
		if x.over {
			st.over++
		}
		lats = append(lats, x.lat)
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		st.p50 = lats[len(lats)/2]
		st.p99 = lats[min(len(lats)-1, len(lats)*99/100)]
		st.max = lats[len(lats)-1]
	}
	st.perSec = float64(len(s)) / dur.Seconds()
	return st
}

// window returns the samples sent in [from, to).
func window(s []sample, from, to time.Duration) []sample {
	lo, _ := slices.BinarySearchFunc(s, from, func(x sample, t time.Duration) int { return int(x.at - t) })
	hi, _ := slices.BinarySearchFunc(s, to, func(x sample, t time.Duration) int { return int(x.at - t) })
	return s[lo:hi]
}

func ms(d time.Duration) string {
	switch {
	case d == 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}
