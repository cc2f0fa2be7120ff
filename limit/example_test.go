package limit_test

import (
	"fmt"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Burst, by example: 20 requests at once from a full bucket, then one every
// 10 ms; an idle key is full again after 200 ms.
func ExampleLimit_WithBurst() {
	l := limit.PerSecond(100).WithBurst(20)
	fmt.Println(l)
	fmt.Println("at once:", l.Capacity(), "then one every", l.Interval(), "full again after", l.Tolerance())
	// Output:
	// 100/1s burst 20 token_bucket
	// at once: 20 then one every 10ms full again after 200ms
}
