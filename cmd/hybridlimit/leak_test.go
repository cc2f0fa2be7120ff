package main

import (
	"testing"

	"go.uber.org/goleak"
)

// Every command stops what it starts: fleets, reconcilers, proxies, the
// gateway's server and rules watcher.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
