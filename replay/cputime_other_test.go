//go:build !unix

package replay

import "time"

// cpuTime is not measured here: the benchmark reports no CPU figure.
func cpuTime() time.Duration { return 0 }
