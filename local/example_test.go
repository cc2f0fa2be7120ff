package local_test

import (
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
)

// The engine takes the time as a parameter: here, fixed instants.
func ExampleEngine_AllowN() {
	e, err := local.New(local.Config{})
	if err != nil {
		panic(err)
	}
	t0 := time.Unix(1_800_000_000, 0).UnixNano()
	lim := limit.PerMinute(3).WithAlgorithm(limit.SlidingWindowLog)
	for _, at := range []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second, 61 * time.Second} {
		res, err := e.AllowN(t0+int64(at), "login:alice", lim, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("at %v: allowed=%v retry-after=%v\n", at, res.Allowed, res.RetryAfter)
	}
	// Output:
	// at 0s: allowed=true retry-after=0s
	// at 10s: allowed=true retry-after=0s
	// at 20s: allowed=true retry-after=0s
	// at 30s: allowed=false retry-after=30s
	// at 1m1s: allowed=true retry-after=0s
}

// A clock that ran five minutes ahead is brought back: the fixed window it
// spent in becomes the current one, its count kept, so nothing refills.
func ExampleEngine_Rewind() {
	e, err := local.New(local.Config{})
	if err != nil {
		panic(err)
	}
	t0 := time.Unix(1_800_000_000, 0).UnixNano()
	lim := limit.PerSecond(2).WithAlgorithm(limit.FixedWindow)
	ahead := t0 + int64(5*time.Minute)
	for range 3 {
		res, _ := e.AllowN(ahead, "k", lim, 1)
		fmt.Println("ahead:", res.Allowed)
	}
	fmt.Println("shards rewound:", e.Rewind(t0))
	res, _ := e.AllowN(t0, "k", lim, 1)
	fmt.Println("now:", res.Allowed)
	// Output:
	// ahead: true
	// ahead: true
	// ahead: false
	// shards rewound: 1
	// now: false
}
