package metrics_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/metrics"
	"github.com/hybridlimit/hybridlimit/observe"
)

// A Recorder on a private registry, watching a limiter, fed the events a
// middleware reports. Serve reg with promhttp.HandlerFor(reg, ...).
func Example() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	// Client labels are hashed: the same key on every node gives one client
	// one label across the fleet (metrics.PlainClientLabel keeps them readable).
	rec, err := metrics.New(reg, metrics.Options{ClientLabelKey: []byte("fleet secret")})
	if err != nil {
		panic(err)
	}
	lim, err := hybrid.New(hybrid.Config{}) // local only: set Redis for a fleet
	if err != nil {
		panic(err)
	}
	defer lim.Close(ctx)
	if err := rec.Watch(lim); err != nil {
		panic(err)
	}

	// What the middleware does for each request, with rec as its Observer.
	for range 3 {
		start := time.Now()
		d, err := lim.Allow(ctx, "per_user|user:42", hybrid.PerSecond(2))
		if err != nil {
			panic(err)
		}
		rec.ObserveCheck(observe.CheckEvent{Rule: "per_user", Decision: d, Latency: time.Since(start)})
		ev := observe.RequestEvent{Outcome: observe.Passed, Client: "user:42", Latency: time.Since(start)}
		if !d.Allowed {
			ev.Outcome, ev.Rule = observe.Limited, "per_user"
		}
		rec.ObserveRequest(ev)
	}

	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "rate_limit_exceeded_total", "rate_limit_near_limit_total", "rate_limit_client_exceeded_total", "rate_limit_keys_in_memory":
			m := mf.GetMetric()[0]
			labels := ""
			for _, l := range m.GetLabel() {
				labels += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
			}
			fmt.Println(mf.GetName()+labels, m.GetCounter().GetValue()+m.GetGauge().GetValue())
		}
	}
	// Output:
	// rate_limit_client_exceeded_total{client_id="user:e862fabc950ea3ec"} 1
	// rate_limit_exceeded_total{rule="per_user"} 1
	// rate_limit_keys_in_memory 1
	// rate_limit_near_limit_total{rule="per_user"} 1
}

// The client_id label a Recorder with Options.ClientLabelKey gives a client
// key: what to search the metrics for when a known client complains.
func ExampleClientLabelOf() {
	key := []byte("fleet secret") // from a secret every node shares
	fmt.Println(metrics.ClientLabelOf(key, "ip:203.0.113.7"))
	fmt.Println(metrics.ClientLabelOf(key, "user:42"))
	// Output:
	// ip:5d7ed0de44a3660d
	// user:e862fabc950ea3ec
}
