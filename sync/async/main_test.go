package async

import (
	"testing"

	"go.uber.org/goleak"
)

// The runner starts goroutines (its loops, the calls' subscription): none
// outlives a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
