package redistest

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// QuietClientLogs stops go-redis from logging, for the whole test binary:
// it logs every dial that fails, and the outages tests cause on purpose
// would bury their output. Call it from TestMain.
func QuietClientLogs() { redis.SetLogger(discard{}) }

type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}
