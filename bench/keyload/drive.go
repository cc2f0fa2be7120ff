package keyload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hybridlimit/hybridlimit/bench/measure"
)

// Source is where a node says a decision came from (hybrid.Decision's
// Source), or Unknown for a limiter that does not say.
type Source uint8

const (
	Unknown Source = iota
	Local
	Remote
	Degraded
	numSources
)

// Answer is one node's decision.
type Answer struct {
	Allowed bool
	Source  Source
	// Waited: the decision waited on something beyond the node's memory
	// (Redis, the fleet), as far as the node can tell.
	Waited bool
}

// Node decides one request for key on one node. It is called from many
// goroutines at once.
type Node func(ctx context.Context, key string) (Answer, error)

// Defaults of Config's zero fields.
const (
	DefaultWorkers = 64
	DefaultDrain   = 5 * time.Second
)

// Config is how Drive sends a stream. The zero value is ready.
type Config struct {
	// Workers is how many goroutines call each node: at most that many of a
	// node's callers wait on it at once, as a service's request handlers
	// would. Zero means 64.
	Workers int
	// Queue is how many requests may wait for a worker at each node. A
	// request that finds its node's queue full is not sent (Result.Shed),
	// and counts as unanswered. Zero means two seconds of a node's even
	// share of the rate (at least 1,024): a node has to keep its callers
	// waiting for about two seconds to shed.
	Queue int
	// Drain is how long after the last scheduled request Drive waits for
	// answers; a request still queued then is not sent (Result.Late). Zero
	// means 5 s.
	Drain time.Duration
	// OnMeasure, if set, is called at the measured part's start on a
	// goroutine of its own (to read counters); Drive returns after it has.
	OnMeasure func()
}

// Result is what Drive measured. Every figure but Outcomes is of the
// measured part.
type Result struct {
	// Offered is the measured part's requests; Decided those answered
	// (admitted, refused or failed), Admitted and Errors among them.
	Offered, Decided, Admitted, Errors int64
	// Shed counts requests never sent because their node's queue was full;
	// Late those still queued when the drain ended. Both are unanswered.
	Shed, Late int64
	// Sources counts the decided requests by the Source their node gave.
	Sources [numSources]int64
	// Waited counts the decided requests whose answer says it waited;
	// FromMemory those answered from memory: Source Local, not waited.
	Waited, FromMemory int64
	// Latency is each answered request's latency from its scheduled send
	// time to its answer: the wait for a worker counts, so a node that
	// keeps its callers stuck shows here (no coordinated omission).
	Latency measure.Histogram
	// Service is each answered request's call alone, from the moment a
	// worker called the node.
	Service measure.Histogram
	// Answered counts the answers given from the measured part's start on,
	// to requests of the warm-up too: the decisions the work of a node (and
	// of Redis) over that stretch paid for, whichever requests they were.
	// Elapsed runs from the measured part's start to the last answer.
	Answered   int64
	Elapsed    time.Duration
	FirstError error
	// Outcomes holds what became of each request of the stream, warm-up
	// included, in the stream's order; Waits whether its answer said it
	// waited.
	Outcomes []Outcome
	Waits    []bool
}

// Unanswered is the measured part's requests not answered.
func (r *Result) Unanswered() int64 { return r.Offered - r.Decided }

// Quantile is the latency at quantile q (0.5, 0.99) of every request
// offered, an unanswered one counting as slower than any answered: ok is
// false when the quantile falls among the unanswered.
func (r *Result) Quantile(q float64) (d time.Duration, ok bool) {
	if r.Offered == 0 || r.Decided == 0 {
		return 0, false
	}
	rank := int64(math.Ceil(q * float64(r.Offered))) // 1-based, among all offered
	rank = min(max(rank, 1), r.Offered)
	if rank > r.Decided {
		return 0, false
	}
	return r.Latency.Quantile(float64(rank-1) / float64(r.Decided)), true
}

// Drive sends s to nodes (nodes[i] receives the requests for node i), each
// request at its scheduled instant whatever the earlier ones' fate, and
// waits for the answers. It returns early, with ctx's error, if ctx ends.
func Drive(ctx context.Context, nodes []Node, s *Stream, cfg Config) (*Result, error) {
	if len(nodes) != s.Spec.Nodes {
		return nil, fmt.Errorf("keyload: %d nodes for a stream of %d", len(nodes), s.Spec.Nodes)
	}
	if cfg.Workers < 0 || cfg.Queue < 0 || cfg.Drain < 0 {
		return nil, errors.New("keyload: negative workers, queue or drain")
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Queue == 0 {
		cfg.Queue = max(1024, int(2*s.Spec.Rate/float64(s.Spec.Nodes)))
	}
	if cfg.Drain == 0 {
		cfg.Drain = DefaultDrain
	}
	res := &Result{Offered: int64(s.Offered()), Outcomes: make([]Outcome, len(s.Requests)), Waits: make([]bool, len(s.Requests))}
	// The schedule's origin: the warm-up's first request is due now.
	zero := time.Now().Add(-s.Requests[0].At)
	cutoff := zero.Add(s.Duration + cfg.Drain)

	var measuring sync.WaitGroup
	if cfg.OnMeasure != nil {
		measuring.Add(1)
		t := time.AfterFunc(time.Until(zero), func() { defer measuring.Done(); cfg.OnMeasure() })
		defer func() {
			if t.Stop() { // not started: the run ended before the measured part
				measuring.Done()
			}
			measuring.Wait()
		}()
	}

	var mu sync.Mutex
	var workers sync.WaitGroup
	queues := make([]chan int32, len(nodes))
	for n, node := range nodes {
		q := make(chan int32, cfg.Queue)
		queues[n] = q
		for range cfg.Workers {
			workers.Go(func() {
				w := worker{res: res, s: s, zero: zero, cutoff: cutoff}
				w.run(ctx, node, q)
				mu.Lock()
				defer mu.Unlock()
				w.mergeInto(res)
			})
		}
	}
	shed := dispatch(ctx, s, zero, queues)
	for _, q := range queues {
		close(q)
	}
	workers.Wait()
	res.Shed = shed
	res.Late = res.Offered - res.Decided - res.Shed
	return res, ctx.Err()
}

// dispatch hands each request to its node's queue at its instant and
// returns how many of the measured part found the queue full.
func dispatch(ctx context.Context, s *Stream, zero time.Time, queues []chan int32) (shed int64) {
	timer := time.NewTimer(time.Hour)
	timer.Stop() // Reset below: since Go 1.23 a stopped timer's channel holds nothing stale
	defer timer.Stop()
	for i := 0; i < len(s.Requests); {
		if d := time.Until(zero.Add(s.Requests[i].At)); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return shed
			case <-timer.C:
			}
		}
		now := time.Since(zero)
		for ; i < len(s.Requests) && s.Requests[i].At <= now; i++ {
			select {
			case queues[s.Requests[i].Node] <- int32(i):
			default: // its Outcome stays Unanswered
				if s.Requests[i].At >= 0 {
					shed++
				}
			}
		}
	}
	return shed
}

// worker calls one node for the requests of its queue, keeping its own
// counts until the queue closes.
type worker struct {
	res    *Result // Outcomes and Waits only: each index is written by one worker
	s      *Stream
	zero   time.Time
	cutoff time.Time

	decided, admitted, errs int64
	waited, memory          int64
	answered                int64
	sources                 [numSources]int64
	latency, service        measure.Histogram
	last                    time.Time
	first                   error
}

func (w *worker) run(ctx context.Context, node Node, q <-chan int32) {
	for i := range q {
		r := w.s.Requests[i]
		if ctx.Err() != nil || time.Now().After(w.cutoff) {
			continue // Late, or the run was cancelled: not sent
		}
		t0 := time.Now()
		ans, err := node(ctx, w.s.Names[r.Key])
		t1 := time.Now()
		o := Refused
		switch {
		case err != nil:
			o = Failed
		case ans.Allowed:
			o = Admitted
		}
		w.res.Outcomes[i] = o
		w.res.Waits[i] = ans.Waited
		if !t1.Before(w.zero) {
			w.answered++
			if t1.After(w.last) {
				w.last = t1
			}
		}
		if r.At < 0 {
			continue
		}
		w.decided++
		switch o {
		case Failed:
			w.errs++
			if w.first == nil {
				w.first = err
			}
		case Admitted:
			w.admitted++
		}
		if ans.Source < numSources {
			w.sources[ans.Source]++
		}
		if ans.Waited {
			w.waited++
		} else if ans.Source == Local {
			w.memory++
		}
		w.latency.Record(t1.Sub(w.zero.Add(r.At)))
		w.service.Record(t1.Sub(t0))
	}
}

func (w *worker) mergeInto(r *Result) {
	r.Decided += w.decided
	r.Admitted += w.admitted
	r.Errors += w.errs
	r.Answered += w.answered
	r.Waited += w.waited
	r.FromMemory += w.memory
	for i, n := range w.sources {
		r.Sources[i] += n
	}
	r.Latency.Merge(&w.latency)
	r.Service.Merge(&w.service)
	if !w.last.IsZero() {
		r.Elapsed = max(r.Elapsed, w.last.Sub(w.zero))
	}
	if r.FirstError == nil {
		r.FirstError = w.first
	}
}
