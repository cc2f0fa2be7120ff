package remote_test

import (
	"fmt"

	"github.com/hybridlimit/hybridlimit/remote"
)

// Which of Redis's eviction policies can evict the limiter's keys: all but
// noeviction, since every key the limiter writes has a time to live.
// Store.MaxmemoryPolicy reads the policy a Redis runs with.
func ExampleEvictsKeys() {
	for _, p := range []string{"noeviction", "allkeys-lru", "volatile-ttl"} {
		fmt.Println(p, remote.EvictsKeys(p))
	}
	// Output:
	// noeviction false
	// allkeys-lru true
	// volatile-ttl true
}
