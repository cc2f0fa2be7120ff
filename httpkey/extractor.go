package httpkey

import (
	"errors"
	"fmt"
	"net/http"
)

// Extractor returns the rate-limit key of a request: a non-empty string, or
// an error. An error that wraps ErrNoKey means the source has nothing for
// this request; any other error means the request (ErrMalformed) or the
// configuration is unusable, and the key must not be guessed.
//
// The zero value (nil) is not usable; build one with IP, APIKey, User,
// Endpoint, First or All, or write a function of this type. A method value
// such as (*IPResolver).Key is one too. Every Extractor built here is safe for
// concurrent use; one you write must be too, since a middleware calls it from
// every request's goroutine.
type Extractor func(*http.Request) (string, error)

// First returns an Extractor that tries each extractor in order and returns
// the first key found: First(User(f), APIKey(c), IP(r)) keys by user if the
// request is authenticated, else by API key, else by address.
//
// An extractor's error that wraps ErrNoKey moves First on to the next one; any
// other error is returned at once, so that a malformed API key is refused
// rather than quietly limited by address. When no extractor has a key, First
// returns an error wrapping ErrNoKey.
//
// First panics if given no extractors or a nil one: both are programming
// errors best caught at startup.
func First(extractors ...Extractor) Extractor {
	es := checkExtractors("First", extractors)
	noKey := fmt.Errorf("%w: none of %d extractors found a key", ErrNoKey, len(es))
	return func(r *http.Request) (string, error) {
		for _, e := range es {
			key, err := e(r)
			if err == nil {
				return key, nil
			}
			if !errors.Is(err, ErrNoKey) {
				return "", err
			}
		}
		return "", noKey
	}
}

// All returns an Extractor whose key holds every extractor's key, in order,
// joined by '|': All(IP(r), User(f), Endpoint()) gives
// "ip:1.2.3.4|user:42|endpoint:GET /x". Limiting on such a key means a client
// must change all of its parts to get a fresh budget.
//
// Each part is escaped before joining, '\' as `\\` and '|' as `\|`, so the key
// is unambiguous: two different lists of parts never give the same key, even
// when a user id or API key contains '|' or '\'. Parts without those bytes
// appear unchanged.
//
// If any extractor fails, All returns its error unchanged: a part with no key
// (ErrNoKey) makes the whole key missing, which lets First fall back to
// another combination.
//
// All panics if given no extractors or a nil one.
func All(extractors ...Extractor) Extractor {
	es := checkExtractors("All", extractors)
	return func(r *http.Request) (string, error) {
		var buf [4]string
		parts := buf[:0]
		for _, e := range es {
			key, err := e(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, key)
		}
		return joinParts(parts), nil
	}
}

// checkExtractors returns a copy of extractors, so that a caller changing its
// slice later cannot change the policy, after checking it is usable.
func checkExtractors(name string, extractors []Extractor) []Extractor {
	if len(extractors) == 0 {
		panic("httpkey: " + name + " needs at least one extractor")
	}
	for i, e := range extractors {
		if e == nil {
			panic(fmt.Sprintf("httpkey: %s: extractor %d of %d is nil", name, i, len(extractors)))
		}
	}
	return append([]Extractor(nil), extractors...)
}
