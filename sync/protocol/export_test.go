package protocol

// SetRestEnd sets when the runner's last rest ends (ns), as Rest would for a
// node at rest: tests of what a call does then.
func (s *Shares) SetRestEnd(ns int64) { s.mu.Lock(); s.restEnd = ns; s.mu.Unlock() }
