package metrics

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"runtime"
	"sync"
	"sync/atomic"
)

// ClientLabelHashBytes is how many bytes of a client key's HMAC-SHA256 a
// hashed client_id label keeps: 8 bytes, 16 hex digits. Among the at most
// Options.TopClients labels held at once, two clients sharing one is
// practically impossible (about 1 in 10^15 for 100 clients).
const ClientLabelHashBytes = 8

// maxKindLen bounds the source prefix a hashed label keeps ("ip", "key",
// "user", "ip+key"): longer prefixes are not kinds and are hashed with the
// rest.
const maxKindLen = 24

// PlainClientLabel is an Options.ClientLabel that keeps every client key as
// it is: client_id="ip:203.0.113.7", client_id="key:…". Use it only where
// the metrics are as private as the traffic: an API key used as the client
// key becomes readable by anyone who can query Prometheus.
func PlainClientLabel(client string) string { return client }

// ClientLabelOf returns the client_id label a Recorder whose
// Options.ClientLabelKey is key gives the client key client: the key's
// source prefix ("ip", "key", "user", several joined by "+"), a colon, and
// the first ClientLabelHashBytes bytes of HMAC-SHA256(key, client) in hex.
// It answers "which label is this client?" for an operator who knows the
// key; the same HMAC in a shell:
//
//	printf '%s' 'ip:203.0.113.7' | openssl dgst -sha256 -hmac "$KEY" | awk '{print substr($NF, 1, 16)}'
//
// (a key that is not valid text needs openssl's -mac hmac -macopt hexkey:).
func ClientLabelOf(key []byte, client string) string {
	h := newClientHasher(key)
	return string(h.label(client))
}

// clientHasher turns client keys into hashed labels. Its label method
// allocates nothing once its scratch buffers have grown to the longest key
// seen; it is not safe for concurrent use (hashedLabels stripes them).
type clientHasher struct {
	mac hash.Hash // HMAC-SHA256 under the key; Reset keeps the key's pads
	msg []byte    // the client key, as bytes
	sum []byte    // the MAC
	buf []byte    // the label
}

func newClientHasher(key []byte) *clientHasher {
	return &clientHasher{mac: hmac.New(sha256.New, key), sum: make([]byte, 0, sha256.Size)}
}

// label returns client's hashed label, in a buffer the next call reuses.
func (h *clientHasher) label(client string) []byte {
	h.msg = append(h.msg[:0], client...)
	h.mac.Reset()
	h.mac.Write(h.msg)
	h.sum = h.mac.Sum(h.sum[:0])

	h.buf = appendKind(h.buf[:0], client)
	if len(h.buf) > 0 {
		h.buf = append(h.buf, ':')
	}
	n := len(h.buf)
	h.buf = append(h.buf, make([]byte, 2*ClientLabelHashBytes)...)
	hex.Encode(h.buf[n:], h.sum[:ClientLabelHashBytes])
	return h.buf
}

// appendKind appends to dst the source prefixes of client's parts: "ip" of
// "ip:203.0.113.7", "ip+key" of "ip:203.0.113.7|key:abc" (httpkey's
// composite keys join parts with '|', escaping it with '\'). A part without
// a prefix of lowercase letters and a colon adds nothing; if the kinds
// would exceed maxKindLen, none is kept.
func appendKind(dst []byte, client string) []byte {
	start := len(dst)
	partStart := true
	for i := 0; i < len(client); i++ {
		c := client[i]
		switch {
		case c == '\\':
			i++ // an escaped byte is inside a part
			partStart = false
			continue
		case c == '|':
			partStart = true
			continue
		case !partStart:
			continue
		}
		partStart = false
		j := i
		for j < len(client) && 'a' <= client[j] && client[j] <= 'z' {
			j++
		}
		if j == i || j == len(client) || client[j] != ':' {
			continue
		}
		if len(dst) > start {
			dst = append(dst, '+')
		}
		dst = append(dst, client[i:j]...)
		if len(dst)-start > maxKindLen {
			return dst[:start]
		}
		i = j
	}
	return dst
}

// hashedLabels is the default Options.ClientLabel, kept inside the package
// so that it allocates nothing for a client whose series already exists.
// Its hashers are striped, each behind its own lock, so that concurrent
// limited requests rarely wait for one another (a sync.Pool would do, but
// drops what it holds at every GC and, under the race detector, at random).
type hashedLabels struct {
	next    atomic.Uint32
	hashers []lockedHasher
}

type lockedHasher struct {
	mu sync.Mutex
	h  *clientHasher
	_  [40]byte // its own cache line, against false sharing
}

func newHashedLabels(key []byte) (*hashedLabels, error) {
	if key == nil {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("metrics: a random key for client labels: %w", err)
		}
	}
	l := &hashedLabels{hashers: make([]lockedHasher, 2*runtime.GOMAXPROCS(0))}
	for i := range l.hashers {
		l.hashers[i].h = newClientHasher(key) // copies what it needs of key
	}
	return l, nil
}

// with runs f with a hasher of its own.
func (l *hashedLabels) with(f func(*clientHasher)) {
	lh := &l.hashers[l.next.Add(1)%uint32(len(l.hashers))]
	lh.mu.Lock()
	defer lh.mu.Unlock()
	f(lh.h)
}
