package clock

import (
	"testing"
	"time"
)

// MapNow against Map of the clock read the way the limiter read it before
// (through the Clock interface, wall and monotonic), in one run:
//
//	go test -run '^$' -bench MapNow -count 5 ./clock/
func BenchmarkMapNow(b *testing.B) {
	var c Clock = Real{}
	o := NewOffset(c.Now())
	o.Observe(c.Now(), time.Now().Add(time.Millisecond), c.Now())
	var sink int64
	b.Run("Map(Clock.Now())", func(b *testing.B) {
		for b.Loop() {
			sink += o.Map(c.Now())
		}
	})
	b.Run("MapNow", func(b *testing.B) {
		for b.Loop() {
			sink += o.MapNow()
		}
	})
	_ = sink
}
