package local

import (
	"testing"
	"unsafe"
)

// TestLayout pins the sizes the memory and false-sharing budgets rest on.
func TestLayout(t *testing.T) {
	if s := unsafe.Sizeof(entry{}); s != 64 {
		t.Errorf("entry is %d bytes; the memory budget assumes 64 (a size class)", s)
	}
	if s := unsafe.Sizeof(shard{}); s%64 != 0 {
		t.Errorf("shard is %d bytes; pad it to a multiple of 64 so neighbouring locks do not share a cache line", s)
	}
}
