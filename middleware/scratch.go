package middleware

import (
	"sync"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/rules"
)

// scratch is one request's working memory, pooled so that the hot path
// allocates none of it: the planned checks, their decisions, and the bytes
// of the header values.
type scratch struct {
	checks []rules.Check
	ds     []hybrid.Decision
	buf    []byte
}

// maxPooledBuf bounds the header buffer kept in the pool, so that one
// request with an unusually long RateLimit-Policy does not pin its buffer.
const maxPooledBuf = 4 << 10

// scratchPool pools scratch. The zero value is ready to use.
type scratchPool struct{ p sync.Pool }

// get returns a scratch whose checks can take n without growing.
func (sp *scratchPool) get(n int) *scratch {
	sc, _ := sp.p.Get().(*scratch)
	if sc == nil {
		sc = &scratch{buf: make([]byte, 0, 256)}
	}
	if cap(sc.checks) < n {
		sc.checks = make([]rules.Check, 0, max(n, 8))
	}
	return sc
}

// decisions returns the scratch's decision slice, of length n.
func (sc *scratch) decisions(n int) []hybrid.Decision {
	if cap(sc.ds) < n {
		sc.ds = make([]hybrid.Decision, n, max(n, 8))
	}
	sc.ds = sc.ds[:n]
	return sc.ds
}

// put returns sc to the pool, dropping its references to the request's keys.
func (sp *scratchPool) put(sc *scratch) {
	clear(sc.checks) // the checks Plan returned, stored back by the caller
	sc.checks = sc.checks[:0]
	sc.ds = sc.ds[:0]
	sc.buf = sc.buf[:0]
	if cap(sc.buf) > maxPooledBuf {
		sc.buf = make([]byte, 0, 256)
	}
	sp.p.Put(sc)
}
