package measure

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook counting what a client sends: commands (each
// command of a pipeline or transaction counts) and round trips (a single
// command, or a whole pipeline). Share one Counter among all the clients of
// a contender.
type Counter struct {
	cmds, trips atomic.Int64
}

var _ redis.Hook = (*Counter)(nil)

// DialHook passes dials through.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

// ProcessHook counts one command and one round trip.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.cmds.Add(1)
		c.trips.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts every command of the pipeline and one round trip.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.cmds.Add(int64(len(cmds)))
		c.trips.Add(1)
		return next(ctx, cmds)
	}
}

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() (cmds, trips int64) { return c.cmds.Load(), c.trips.Load() }

// ServerStats is what Redis itself counted over a phase (INFO commandstats,
// after CONFIG RESETSTAT): calls include the commands scripts run inside
// Redis; Usec is the time Redis spent executing them.
type ServerStats struct {
	Calls int64
	Usec  int64
	By    map[string]int64 // calls by command
}

// ignored are the commands the harness itself sends to read the stats.
var ignored = map[string]bool{"info": true, "config|resetstat": true, "config": true}

// ResetServerStats zeroes Redis's command statistics (CONFIG RESETSTAT) on
// the harness's own admin client.
func ResetServerStats(ctx context.Context, admin *redis.Client) error {
	return admin.ConfigResetStat(ctx).Err()
}

// ReadServerStats reads INFO commandstats, leaving out the harness's own
// INFO and CONFIG calls.
func ReadServerStats(ctx context.Context, admin *redis.Client) (ServerStats, error) {
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return ServerStats{}, err
	}
	return ParseCommandStats(info), nil
}

// ParseCommandStats parses the text of INFO commandstats.
func ParseCommandStats(info string) ServerStats {
	s := ServerStats{By: map[string]int64{}}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok || ignored[name] {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				s.Calls += n
				s.By[name] += n
			case "usec":
				s.Usec += n
			}
		}
	}
	return s
}
