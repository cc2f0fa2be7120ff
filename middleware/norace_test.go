//go:build !race

package middleware

// raceEnabled: the race detector is on.
const raceEnabled = false
