package fleetsim

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the package starts ends with what started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
