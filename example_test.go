package hybridlimit_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Two nodes of one service share one limit through Redis, in Async mode
// (the default): each decides from memory within its share of the limit, and
// a request beyond its share asks the fleet, which moves room from the node
// holding it unused. So the limit is the fleet's, wherever the requests
// land. The example finds its Redis in REDIS_ADDR, and writes only keys
// under a prefix of its own: copy it into your module and run it with
//
//	REDIS_ADDR=127.0.0.1:6379 go test -run Example_twoNodes -v .
//
// Without REDIS_ADDR it prints how to set it, which go test reports as
// output that does not match. In this repository, go test points
// REDIS_ADDR at a private redis-server it starts (main_test.go), and
// skips the example, saying why, when it cannot start one.
func Example_twoNodes() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		fmt.Println("skipped: set REDIS_ADDR to a Redis this example may write to, such as 127.0.0.1:6379")
		return
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	// Every node of the service has the same configuration: the same Redis
	// and prefix, and the fleet's size, known when the fleet is deployed at
	// once. The prefix is this run's own, so that each run starts afresh
	// (its keys expire within the hour). AskWait and RedisTimeout leave room
	// for a busy machine: a request beyond its node's share may wait up to a
	// second for the fleet (by default two sync intervals, 40 ms), and a
	// call to Redis half a second before it counts as failed (by default
	// 50 ms; failed calls open the breaker, and decisions are then made
	// under the fallback).
	cfg := hybrid.Config{
		Redis:        rdb,
		Prefix:       fmt.Sprintf("example-%d:", time.Now().UnixNano()),
		Mode:         hybrid.Async,
		FleetSize:    2,
		AskWait:      time.Second,
		RedisTimeout: 500 * time.Millisecond,
	}
	var nodes [2]*hybrid.Limiter
	for i := range nodes {
		cfg.Node = fmt.Sprintf("node-%c", 'a'+i)
		lim, err := hybrid.New(cfg)
		if err != nil {
			panic(err) // a bad config, or Redis unreachable at start
		}
		nodes[i] = lim
	}
	a, b := nodes[0], nodes[1]

	perClient := hybrid.PerHour(10) // a burst of 10, refilled over the hour
	admitted := 0
	allow := func(node *hybrid.Limiter, client string) {
		d, err := node.Allow(ctx, client, perClient)
		if err != nil {
			panic(err) // only the caller's mistakes: a bad key or limit, a closed limiter
		}
		if d.Allowed {
			admitted++
		}
	}

	// A client whose requests are spread over the nodes: each node admits
	// from its share, half the limit, in memory; once both shares are
	// spent, the fleet has no room left.
	for i := range 12 {
		allow(nodes[i%2], "client:1")
	}
	fmt.Printf("spread over both nodes: %d of 12 admitted\n", admitted)

	// A client whose requests all land on node a (a sticky client): beyond
	// its share, node a asks the fleet, and takes the room node b holds
	// unused. The limit is the fleet's, wherever the requests land.
	admitted = 0
	for range 12 {
		allow(a, "client:2")
	}
	fmt.Printf("all on node a: %d of 12 admitted\n", admitted)
	admitted = 0
	allow(b, "client:2")
	fmt.Printf("then on node b: %d of 1 admitted\n", admitted)

	// Close hands back what a node holds and takes it out of the fleet: in
	// Async mode, its room in contested keys; in Sync mode, the spend it
	// decided in memory that Redis has not counted yet.
	for _, node := range nodes {
		if err := node.Close(ctx); err != nil {
			panic(err)
		}
	}
	// Output:
	// spread over both nodes: 10 of 12 admitted
	// all on node a: 10 of 12 admitted
	// then on node b: 0 of 1 admitted
}
