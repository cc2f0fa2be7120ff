//go:build race

package middleware

// raceEnabled: the race detector is on, and sync.Pool drops items at random
// under it, so allocation counts do not hold.
const raceEnabled = true
