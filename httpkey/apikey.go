package httpkey

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
)

// Defaults of APIKeyConfig.
const (
	// DefaultAPIKeyHeader is the header APIKey reads when
	// APIKeyConfig.Header is empty.
	DefaultAPIKeyHeader = "X-API-Key"

	// DefaultAPIKeyMaxLen is the longest API key, in bytes, APIKey accepts
	// when APIKeyConfig.MaxLen is zero: room for any random key (a 256-bit
	// key is 43 to 64 characters) with margin, small enough that a client
	// cannot fill a limiter's memory with huge keys.
	DefaultAPIKeyMaxLen = 256
)

// APIKeyConfig configures APIKey. The zero value reads DefaultAPIKeyHeader,
// accepts keys up to DefaultAPIKeyMaxLen bytes, and does not hash. An
// APIKeyConfig is a plain value; APIKey copies it.
type APIKeyConfig struct {
	// Header is the request header holding the key, in any case. Empty
	// means DefaultAPIKeyHeader.
	Header string

	// MaxLen is the longest key accepted, in bytes; a longer one is
	// ErrMalformed. Zero means DefaultAPIKeyMaxLen.
	MaxLen int

	// Hash keys by "keyhash:" and the first 16 bytes of the key's SHA-256,
	// in hex (32 digits), instead of "key:" and the key itself.
	//
	// Off by default, because a readable key is easier to debug, to look up
	// in Redis and to match against a customer's complaint. Turn it on when
	// keys are secrets and limiter keys end up where secrets must not: logs,
	// metric labels, Redis dumps, error reports. The hash is a one-way
	// pseudonym, not encryption: it is unkeyed, so a short or guessable API
	// key can be found again by hashing candidates; random keys of 128 bits
	// or more cannot. 128 bits of hash make an accidental collision between
	// two keys (which would share a budget) practically impossible.
	// Hashing adds about a tenth of a microsecond and one allocation per
	// request (BenchmarkKey).
	Hash bool
}

// Validate reports a configuration that every call would refuse: a header
// name that is not an HTTP token, or a negative MaxLen.
func (c APIKeyConfig) Validate() error {
	if c.MaxLen < 0 {
		return fmt.Errorf("httpkey: APIKeyConfig.MaxLen %d is negative", c.MaxLen)
	}
	for i := 0; i < len(c.Header); i++ {
		if !isTchar(c.Header[i]) {
			return fmt.Errorf("httpkey: APIKeyConfig.Header %q is not a header name: byte %#02x at offset %d", c.Header, c.Header[i], i)
		}
	}
	return nil
}

// APIKey returns an Extractor that keys requests by the API key in a header:
// "key:<value>", or "keyhash:<hex>" if cfg.Hash is set.
//
// A request without the header, or with an empty one, has no key (ErrNoKey).
// A key longer than cfg.MaxLen, with a byte outside printable ASCII (0x20 to
// 0x7E: control characters, DEL, anything non-ASCII), or sent in more than one
// header is ErrMalformed. The error names the header, the length or the
// offending byte and its offset, but never the key: errors are logged.
//
// APIKey does not check that the key is valid: that is authentication, and it
// comes later. The limiter runs first so that guessing keys is limited too;
// an attacker sending random keys gets a fresh budget per key, which is why a
// policy should limit unauthenticated requests by address as well (see All).
//
// If cfg is invalid (see Validate), every call returns that error.
func APIKey(cfg APIKeyConfig) Extractor {
	if err := cfg.Validate(); err != nil {
		return func(*http.Request) (string, error) { return "", err }
	}
	name := DefaultAPIKeyHeader // as configured, for messages
	if cfg.Header != "" {
		name = cfg.Header
	}
	canonical := textproto.CanonicalMIMEHeaderKey(name) // as http.Header stores it: "X-Api-Key"
	maxLen := cfg.MaxLen
	if maxLen == 0 {
		maxLen = DefaultAPIKeyMaxLen
	}
	noKey := fmt.Errorf("%w: no %s header", ErrNoKey, name)
	return func(r *http.Request) (string, error) {
		values := r.Header[canonical]
		if len(values) > 1 {
			return "", fmt.Errorf("%w: %d %s headers, want 1", ErrMalformed, len(values), name)
		}
		if len(values) == 0 {
			return "", noKey
		}
		v := strings.Trim(values[0], " \t")
		if v == "" {
			return "", noKey
		}
		if len(v) > maxLen {
			return "", fmt.Errorf("%w: %s is %d bytes, longer than %d", ErrMalformed, name, len(v), maxLen)
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7e {
				return "", fmt.Errorf("%w: %s has byte %#02x at offset %d; only printable ASCII is allowed", ErrMalformed, name, c, i)
			}
		}
		if !cfg.Hash {
			return "key:" + v, nil
		}
		return hashedKey(v), nil
	}
}

// hashedKey returns "keyhash:" and the hex of the first 16 bytes of v's
// SHA-256.
func hashedKey(v string) string {
	const prefix = "keyhash:"
	sum := sha256.Sum256([]byte(v))
	var buf [len(prefix) + 32]byte
	copy(buf[:], prefix)
	hex.Encode(buf[len(prefix):], sum[:16])
	return string(buf[:])
}
