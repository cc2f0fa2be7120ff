package reports

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The low mark is below every decision not settled, and trails the newest
// by at most maxOpenSeqs.
func TestSeqsLowMark(t *testing.T) {
	s := &seqs{next: 100}
	a, low, _ := s.begin()
	assert.Equal(t, int64(100), a)
	assert.Equal(t, int64(99), low)
	b, _, _ := s.begin()
	c, low, _ := s.begin()
	assert.Equal(t, int64(99), low, "a is open")
	s.settle(b)
	assert.Equal(t, int64(99), s.low(), "a still open")
	s.settle(a)
	assert.Equal(t, c-1, s.low(), "a and b settled, c open")
	s.settle(c)
	assert.Equal(t, c, s.low(), "all settled")
	s.settle(c) // twice: nothing
	s.settle(1) // long gone: nothing
	assert.Equal(t, c, s.low())

	// One decision never settled holds the mark for maxOpenSeqs decisions.
	stuck, _, _ := s.begin()
	var forced bool
	for range maxOpenSeqs {
		seq, low, f := s.begin()
		s.settle(seq)
		forced = forced || f
		if !f {
			assert.Equal(t, stuck-1, low)
		}
	}
	assert.True(t, forced)
	assert.Equal(t, uint64(1), s.forcedCount())
	assert.Equal(t, s.next-1, s.low(), "let go: the mark caught up")
}
