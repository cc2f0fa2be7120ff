package remote

import (
	"context"
	_ "embed" // the Lua sources
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/gcra.lua
	gcraSrc string
	//go:embed lua/window.lua
	windowSrc string
	//go:embed lua/log.lua
	logSrc string
	//go:embed lua/reconcile.lua
	reconcileSrc string
	//go:embed lua/fleet.lua
	fleetSrc string
	//go:embed lua/contest.lua
	contestSrc string
	//go:embed lua/ledger.lua
	ledgerSrc string
	//go:embed lua/reset.lua
	resetSrc string
)

// scripts holds every script a store runs.
type scripts struct {
	gcra, window, log, reconcile, fleet, contest, ledger, reset *redis.Script
}

func newScripts() scripts {
	return scripts{
		gcra:      redis.NewScript(gcraSrc),
		window:    redis.NewScript(windowSrc),
		log:       redis.NewScript(logSrc),
		reconcile: redis.NewScript(reconcileSrc),
		fleet:     redis.NewScript(fleetSrc),
		contest:   redis.NewScript(contestSrc),
		ledger:    redis.NewScript(ledgerSrc),
		reset:     redis.NewScript(resetSrc),
	}
}

func (sc scripts) all() []*redis.Script {
	return []*redis.Script{sc.gcra, sc.window, sc.log, sc.reconcile, sc.fleet, sc.contest, sc.ledger, sc.reset}
}

// load runs SCRIPT LOAD for every script on every master the client talks to.
func (sc scripts) load(ctx context.Context, client redis.UniversalClient) error {
	loadOn := func(ctx context.Context, c redis.Scripter) error {
		for _, s := range sc.all() {
			if err := s.Load(ctx, c).Err(); err != nil {
				return classify("load", "", err)
			}
		}
		return nil
	}
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return loadOn(ctx, m) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error { return loadOn(ctx, m) })
	default:
		return loadOn(ctx, client)
	}
}

// isNoScript reports whether err says Redis does not have the script.
func isNoScript(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOSCRIPT")
}
