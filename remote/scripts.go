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
	//go:embed lua/ledger.lua
	ledgerSrc string
	//go:embed lua/reset.lua
	resetSrc string
	//go:embed lua/shares.lua
	sharesSrc string
	//go:embed lua/registry.lua
	registrySrc string
	//go:embed lua/peek.lua
	peekSrc string
)

// scripts holds every script a store runs.
type scripts struct {
	gcra, window, log, reconcile, fleet, ledger, reset, shares, registry, peek *redis.Script
}

func newScripts() scripts {
	return scripts{
		gcra:      redis.NewScript(gcraSrc),
		window:    redis.NewScript(windowSrc),
		log:       redis.NewScript(logSrc),
		reconcile: redis.NewScript(reconcileSrc),
		fleet:     redis.NewScript(fleetSrc),
		ledger:    redis.NewScript(ledgerSrc),
		reset:     redis.NewScript(resetSrc),
		shares:    redis.NewScript(sharesSrc),
		registry:  redis.NewScript(registrySrc),
		peek:      redis.NewScript(peekSrc),
	}
}

func (sc scripts) all() []*redis.Script {
	return []*redis.Script{sc.gcra, sc.window, sc.log, sc.reconcile, sc.fleet, sc.ledger, sc.reset, sc.shares, sc.registry, sc.peek}
}

// sources returns every script's source, in the order of all.
func sources() []string {
	return []string{gcraSrc, windowSrc, logSrc, reconcileSrc, fleetSrc, ledgerSrc, resetSrc, sharesSrc, registrySrc, peekSrc}
}

// load runs SCRIPT LOAD for every script on every master the client talks to.
// A user not allowed SCRIPT LOAD (NOPERM) is no error: its calls go by EVAL.
func (sc scripts) load(ctx context.Context, client redis.UniversalClient) error {
	// One round trip a server: a Redis far away at start is slow, not dead.
	// (Not Script.Load on the pipeline: go-redis takes the hash from the
	// command's reply at once, empty before the pipeline runs.)
	loadOn := func(ctx context.Context, c redis.Cmdable) error {
		srcs := sources()
		cmds := make([]*redis.StringCmd, 0, len(srcs))
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, src := range srcs {
				cmds = append(cmds, p.ScriptLoad(ctx, src))
			}
			return nil
		})
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil && !isNoPerm(err) {
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

// run runs sc by EVALSHA and, when Redis has lost it (a restart, SCRIPT
// FLUSH, a promoted replica), loads it with SCRIPT LOAD and runs it by
// EVALSHA again: so a least-privileged user allowed EVALSHA and SCRIPT LOAD,
// but not EVAL, recovers. Only when SCRIPT LOAD fails does it fall back to
// EVAL (a user allowed EVAL and not SCRIPT LOAD).
func run(ctx context.Context, client redis.UniversalClient, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd := sc.EvalSha(ctx, client, keys, args...)
	if !isNoScript(cmd.Err()) {
		return cmd
	}
	if sc.Load(ctx, client).Err() != nil {
		return sc.Eval(ctx, client, keys, args...)
	}
	return sc.EvalSha(ctx, client, keys, args...)
}

// reloader sends again the calls of a pipeline that Redis refused with
// NOSCRIPT: by EVALSHA after one SCRIPT LOAD per script, or by EVAL where
// SCRIPT LOAD failed, as run does. The zero value is not usable: give it the
// client.
type reloader struct {
	client redis.UniversalClient
	loaded map[*redis.Script]bool
}

// again queues sc's call on pipe.
func (r *reloader) again(ctx context.Context, pipe redis.Pipeliner, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	if r.loaded == nil {
		r.loaded = make(map[*redis.Script]bool)
	}
	ok, tried := r.loaded[sc]
	if !tried {
		ok = sc.Load(ctx, r.client).Err() == nil
		r.loaded[sc] = ok
	}
	if ok {
		return sc.EvalSha(ctx, pipe, keys, args...)
	}
	return sc.Eval(ctx, pipe, keys, args...)
}

// isNoScript reports whether err says Redis does not have the script.
func isNoScript(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOSCRIPT")
}

// isNoPerm reports whether err says the ACL user may not run the command.
func isNoPerm(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOPERM")
}
