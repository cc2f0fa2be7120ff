package envoyrls_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// Replicas of the service in Async mode, as rls runs them (AskWait 10 ms,
// under Envoy's 20 ms timeout), offered twice a rule's limit round-robin:
// each whole second admits about the limit, as envoyproxy/ratelimit's
// shared counter does. A denied call used to spend what remained of the
// window by asking the fleet's pool, each ask waiting up to AskWait: a
// denial that was only an ask answered late handed one call the room of
// every replica, and halvings that ran past the window's end spent the next
// window's room. Whole seconds admitted 0 to 106 of 500.
func TestReplicasOverTheLimitAdmitTheLimit(t *testing.T) {
	const (
		replicas = 4
		limit    = 500
		offered  = 2 * limit // calls a second, round-robin
		workers  = 16
		seconds  = 4
		askWait  = 10 * time.Millisecond // rls's default
		// starved is how late the load may wake in a second that is
		// judged: a machine that starves the load starves the replicas'
		// asks too (the race detector's pauses alone reach 10-40 ms).
		starved = 50 * time.Millisecond
	)
	srv := redistest.Start(t)
	rules := static(t, fmt.Sprintf("domain: d\ndescriptors:\n  - key: hot\n    rate_limit: {unit: second, requests_per_unit: %d}\n", limit))
	var rigs []*rig
	for i := range replicas {
		rdb := srv.Client(t, func(*redis.Options) {})
		rigs = append(rigs, startRig(t, rdb,
			hybrid.Config{Mode: hybrid.Async, Node: fmt.Sprint("r", i), Prefix: "rr:", SyncInterval: 20 * time.Millisecond,
				AskWait: askWait, StartDegraded: true},
			envoyrls.Config{Rules: rules, Redis: rdb, Prefix: "rr:", SyncInterval: 20 * time.Millisecond}))
	}
	// Every replica's first heartbeat, then the next whole second: the
	// rule's windows are the epoch's seconds.
	require.Eventually(t, func() bool {
		for _, r := range rigs {
			if r.lim.Degraded() {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	start := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(start))

	// Paced calls, each worker in turn over the replicas, a call's window
	// read by the replica's clock before it is sent.
	var mu sync.Mutex
	sent, admitted := map[int64]int{}, map[int64]int{}
	late := map[int64]time.Duration{} // the most a worker woke late in each second
	var wg sync.WaitGroup
	period := time.Second * workers / offered
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := start.Add(period * time.Duration(w) / workers)
			for i := w; ; i++ {
				time.Sleep(time.Until(next))
				woke := time.Since(next)
				next = next.Add(period)
				r := rigs[i%replicas]
				window := r.lim.Now().Unix()
				if window >= start.Unix()+seconds {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				resp, err := r.client.ShouldRateLimit(ctx, req("d", 1, "hot=k"))
				cancel()
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				late[window] = max(late[window], woke)
				sent[window]++
				if resp.GetOverallCode() == okCode {
					admitted[window]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	judged := 0
	for s := start.Unix(); s < start.Unix()+seconds; s++ {
		want := min(limit, sent[s]) // an exact limiter admits the limit, or what came
		t.Logf("second %d: %d sent, %d admitted (exact: %d), the load up to %v late", s-start.Unix(), sent[s], admitted[s], want, late[s])
		assert.LessOrEqual(t, admitted[s], limit*105/100, "second %d: over the limit", s-start.Unix())
		if sent[s] < limit || late[s] > starved {
			// The machine starved the load, and with it the replicas:
			// asks answered after AskWait refuse calls an exact limiter
			// admits (counted in AskTimeouts), which is the machine's
			// doing. The lower side is judged on time only.
			continue
		}
		judged++
		assert.GreaterOrEqual(t, admitted[s], want*8/10, "second %d: the replicas refused what the limit allows", s-start.Unix())
	}
	for i, r := range rigs {
		st := r.lim.Stats()
		t.Logf("replica %d: ask timeouts %d, %+v", i, st.AskTimeouts, st.Reconcile.Shares)
	}
	t.Logf("%d of %d seconds judged", judged, seconds)
	if judged == 0 {
		t.Logf("the machine starved the load in every second: the lower side was not judged")
	}
}
