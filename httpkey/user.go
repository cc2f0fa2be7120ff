package httpkey

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// User returns an Extractor that keys requests by the authenticated user:
// "user:<id>", where fromContext(r.Context()) returns the id and whether the
// request is authenticated. The application's authentication middleware,
// which must run before the limiter's, puts the user there; fromContext reads
// it back, and must be safe for concurrent use.
//
// An anonymous request (ok false) has no key: ErrNoKey, so that
// First(User(f), IP(r)) limits it by address. An authenticated user with an
// empty id is a bug in fromContext, reported as an error rather than guessed
// around. The id is used as it is: ids are the application's, not the
// client's, and All escapes them.
//
// User panics if fromContext is nil.
func User(fromContext func(context.Context) (id string, ok bool)) Extractor {
	if fromContext == nil {
		panic("httpkey: User needs a function, got nil")
	}
	// Made once, so that an anonymous request costs no allocation.
	errNoUser := fmt.Errorf("%w: no authenticated user in the request context", ErrNoKey)
	errEmptyUser := errors.New("httpkey: the user function reported an authenticated user with an empty id")
	return func(r *http.Request) (string, error) {
		id, ok := fromContext(r.Context())
		if !ok {
			return "", errNoUser
		}
		if id == "" {
			return "", errEmptyUser
		}
		return "user:" + id, nil
	}
}
