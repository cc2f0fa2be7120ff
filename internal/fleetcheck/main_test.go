package fleetcheck

import (
	"flag"
	"testing"

	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

var seedFlag = flag.Int64("seed", 0, "TestReplay: the seed of the scenario to run; TestVerify: the first seed (0: from the clock, printed)")

func TestMain(m *testing.M) {
	redistest.QuietClientLogs() // go-redis logs every dial the outages fail
	goleak.VerifyTestMain(m)
}
