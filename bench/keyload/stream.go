package keyload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/workload"
)

// Request is one request of a stream.
type Request struct {
	// At is its scheduled send time, from the start of the measured part
	// (negative in the warm-up).
	At time.Duration
	// Key is its key's rank, from 0 (the most asked for).
	Key int32
	// Node is the node it is sent to.
	Node uint8
}

// Stream is the requests of one run, laid out before it starts. It is
// read-only once made.
type Stream struct {
	Spec Spec // defaults filled in
	// History, Warmup and Duration are the stretches of the traffic: History
	// is drawn but never sent (it only gives the steady-state first-request
	// figures their look-back), Warmup is sent and not measured, Duration is
	// sent and measured.
	History, Warmup, Duration time.Duration
	// Requests are the ones sent, from -Warmup to Duration, in order of At.
	Requests []Request
	// Measured is the index of the first request of the measured part.
	Measured int
	// Firsts counts the measured part's first requests.
	Firsts Firsts
	// Names are the keys' names, by rank.
	Names []string
}

// Offered is the number of requests of the measured part.
func (s *Stream) Offered() int { return len(s.Requests) - s.Measured }

// Generate lays out spec's traffic: history (drawn, not sent), then warmup
// and duration (sent), the draws seeded by spec.Seed.
func Generate(spec Spec, history, warmup, duration time.Duration) (*Stream, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	if history < 0 || warmup < 0 || duration <= 0 {
		return nil, fmt.Errorf("keyload: history %v, warmup %v, duration %v: want a positive duration, none negative", history, warmup, duration)
	}
	if history+warmup+duration > maxSpan {
		return nil, fmt.Errorf("keyload: %v of traffic: at most %v", history+warmup+duration, maxSpan)
	}
	z, err := workload.NewZipf(spec.Keys, spec.Zipf)
	if err != nil {
		return nil, err
	}
	s := &Stream{Spec: spec, History: history, Warmup: warmup, Duration: duration, Names: names(spec.Keys)}
	s.Requests = make([]Request, 0, int(spec.Rate*(warmup+duration).Seconds())+spec.Clump+16)
	tick := spec.Tick
	begin := -(history + warmup).Truncate(tick)
	if begin > -(history + warmup) {
		begin -= tick
	}
	tr := newTracker(spec.Nodes, spec.Keys, begin, -warmup)
	var turn []uint32 // RoundRobin: the key's clumps so far
	if spec.Routing == RoundRobin {
		turn = make([]uint32, spec.Keys)
	}
	r := rand.New(rand.NewPCG(spec.Seed, 0x6b65796c6f6164))
	perTick := spec.Rate * tick.Seconds() / float64(spec.Clump) // draws
	drawn := int64(0)
	s.Measured = -1
	for i, at := int64(1), begin; at < duration; i, at = i+1, at+tick {
		// The draws due by the end of the i-th tick, counted from the start
		// rather than summed tick by tick, so that rounding never loses one.
		due := int64(math.Floor(float64(i)*perTick + 1e-9))
		for ; drawn < due; drawn++ {
			k := int32(z.Draw(r))
			var node uint8
			switch spec.Routing {
			case Random:
				node = uint8(r.IntN(spec.Nodes))
			case Pinned:
				node = pin(k, spec.Nodes)
			case RoundRobin:
				node = uint8((uint32(pin(k, spec.Nodes)) + turn[k]) % uint32(spec.Nodes))
				turn[k]++
			}
			for range spec.Clump {
				req := Request{At: at, Key: k, Node: node}
				tr.see(req)
				if at < -warmup {
					continue
				}
				if at >= 0 && s.Measured < 0 {
					s.Measured = len(s.Requests)
				}
				s.Requests = append(s.Requests, req)
			}
		}
	}
	if s.Measured < 0 {
		return nil, errors.New("keyload: no request in the measured part: raise the rate or the duration")
	}
	s.Firsts = tr.f
	return s, nil
}

// maxSpan bounds a stream's length: the first-request tracker keeps times
// in int32 milliseconds.
const maxSpan = 24 * time.Hour

// names are the keys' names by rank, as internal/workload's KeySet names
// them.
func names(n int) []string {
	out := make([]string, n)
	for k := range out {
		out[k] = "user:" + strconv.Itoa(k+1)
	}
	return out
}
