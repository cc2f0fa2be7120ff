package limit_test

import (
	"fmt"
	"time"

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

// WindowAt says which window holds an instant, and where it starts and
// ends: here the day the clocks go forward in Paris, 23 hours long.
func ExampleLimit_WindowAt() {
	var zones limit.Zones
	paris, err := zones.Load("Europe/Paris")
	if err != nil {
		panic(err)
	}
	daily := limit.PerCalendar(100, limit.Day, "Europe/Paris")
	at := time.Date(2026, 3, 29, 12, 0, 0, 0, paris)
	w := daily.WindowAt(at.UnixNano(), paris)
	fmt.Println(time.Unix(0, w.Start).In(paris), "to", time.Unix(0, w.End).In(paris), "=", w.Len())
	// Output: 2026-03-29 00:00:00 +0100 CET to 2026-03-30 00:00:00 +0200 CEST = 23h0m0s
}
