package hybridlimit_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/redisproc"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// exampleNeedsRedis is the example that finds its Redis in REDIS_ADDR, as
// a user's copy of it does.
const exampleNeedsRedis = "Example_twoNodes"

// TestMain checks the suites for goroutine leaks (goleak), and points
// REDIS_ADDR at a private redis-server for the examples, whatever it was:
// the tests never write to a Redis they did not start. Without
// redis-server, it skips those examples, saying why.
func TestMain(m *testing.M) {
	redistest.QuietClientLogs() // go-redis logs every dial the outages fail
	flag.Parse()
	srv, err := redisproc.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "skipping %s: it needs a Redis, and none could be started: %v\n", exampleNeedsRedis, err)
		skip := flag.Lookup("test.skip").Value.String()
		if skip != "" {
			skip += "|"
		}
		if err := flag.Set("test.skip", skip+"^"+exampleNeedsRedis+"$"); err != nil {
			panic(err)
		}
		goleak.VerifyTestMain(m)
		return
	}
	if err := os.Setenv("REDIS_ADDR", srv.Addr()); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(), goleak.Cleanup(func(code int) {
		_ = srv.Close()
		os.Exit(code)
	}))
}
