package hybridlimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

// Async mode with Redis: a node decides from memory and reports its spend
// to Redis in the background, every SyncInterval and when it closes, so the
// fleet shares one limit; Close reports what it had not reported yet. A Sync
// node decides each request in Redis (one script per decision, exact).
func Example_asyncWithRedis() {
	ctx := context.Background()
	// A private redis-server for the example; yours is an address such as "redis:6379".
	srv, err := redisproc.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()

	perUser := hybrid.PerHour(10) // a burst of 10, refilled over the hour

	node, err := hybrid.New(hybrid.Config{Redis: rdb, Prefix: "example:", Mode: hybrid.Async, SyncInterval: 10 * time.Millisecond})
	if err != nil {
		panic(err) // a bad config, or Redis unreachable at start
	}
	for range 6 {
		d, err := node.Allow(ctx, "user:42", perUser)
		if err != nil {
			panic(err)
		}
		if !d.Allowed || d.Source != hybrid.Local {
			panic(fmt.Sprintf("want an admission from memory, got %+v", d))
		}
	}
	fmt.Println("async node: 6 requests admitted from memory")
	if err := node.Close(ctx); err != nil { // reports what it spent and had not reported yet
		panic(err)
	}

	// A fleet runs one mode: Sync keeps its exact state in keys of its own,
	// so this Sync node starts from a full bucket and decides in Redis.
	exact, err := hybrid.New(hybrid.Config{Redis: rdb, Prefix: "example:", Mode: hybrid.Sync})
	if err != nil {
		panic(err)
	}
	defer exact.Close(ctx)
	d, err := exact.Allow(ctx, "user:42", perUser)
	if err != nil {
		panic(err)
	}
	fmt.Printf("sync node: allowed=%v remaining=%d source=%v\n", d.Allowed, d.Remaining, d.Source)
	// Output:
	// async node: 6 requests admitted from memory
	// sync node: allowed=true remaining=9 source=remote
}
