package local

import (
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/conformance"
	"github.com/hybridlimit/hybridlimit/limit"
)

// manualBackend runs the engine on a manual clock: every bound is exact.
type manualBackend struct {
	e   *Engine
	clk *clock.Manual
}

func (b *manualBackend) AllowN(_ context.Context, key string, lim limit.Limit, n int64) (limit.Result, error) {
	return b.e.AllowN(b.clk.Now().UnixNano(), key, lim, n)
}
func (b *manualBackend) Now() time.Time       { return b.clk.Now() }
func (b *manualBackend) Wait(d time.Duration) { b.clk.Advance(d) }
func (b *manualBackend) Slack() time.Duration { return 0 }

func TestConformance(t *testing.T) {
	conformance.Run(t, true, func(t *testing.T) conformance.Backend {
		return &manualBackend{e: newEngine(t, Config{}), clk: clock.NewManual(time.Unix(0, t0).Add(123 * time.Millisecond))}
	})
}
