package httpkey

import "errors"

// Errors callers branch on. Extractors wrap them with the values involved, so
// test with errors.Is.
var (
	// ErrNoKey means the source has nothing for this request: no API key
	// header, no authenticated user. It is not a failure of the request:
	// First moves on to its next source when it sees it, and a middleware
	// whose whole policy ends in ErrNoKey chooses what to do (typically a
	// shared bucket or letting the request through).
	ErrNoKey = errors.New("httpkey: no key")

	// ErrMalformed means the request carries a key the extractor refuses: an
	// API key that is too long, holds control or non-ASCII bytes, or is sent
	// in more than one header. It is the client's fault: a middleware answers
	// 400. First does not move on past it: a bad key is refused, not
	// quietly limited by the next source.
	ErrMalformed = errors.New("httpkey: malformed key")
)
