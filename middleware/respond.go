package middleware

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

// The "error" codes of the JSON answers the middleware writes.
const (
	// CodeRateLimited is the 429's code.
	CodeRateLimited = "rate_limit_exceeded"
	// CodeBanned is the code of a banned address's 403.
	CodeBanned = "forbidden"
	// CodePenalty is the code of the 403 of a client under a penalty block.
	CodePenalty = "temporarily_blocked"
	// CodeUnavailable is the 503's code: the limiter fails closed.
	CodeUnavailable = "service_unavailable"
	// CodeBadRequest is DefaultOnError's code for a malformed client key.
	CodeBadRequest = "bad_request"
	// CodeInternal is DefaultOnError's code for every other failure.
	CodeInternal = "internal_error"
)

// Bodies that never change.
const (
	bodyBanned     = `{"error":"` + CodeBanned + `","message":"Requests from this address are forbidden."}`
	bodyBadRequest = `{"error":"` + CodeBadRequest + `","message":"The request's client key is malformed."}`
	bodyInternal   = `{"error":"` + CodeInternal + `","message":"The request could not be rate limited."}`
)

// answer is the JSON body of an answer that tells when to come back.
type answer struct {
	Error      string `json:"error"`
	Message    string `json:"message"`
	RetryAfter int64  `json:"retry_after"`
}

// retrySeconds is d in whole seconds for Retry-After: rounded up, so that a
// client that waits that long finds the request admitted, and at least 1.
func retrySeconds(d time.Duration) int64 {
	return max(ceilSeconds(d), 1)
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// retryMessage is "<lead> Please retry after N second(s).".
func retryMessage(lead string, secs int64) string {
	unit := " seconds."
	if secs == 1 {
		unit = " second."
	}
	return lead + " Please retry after " + strconv.FormatInt(secs, 10) + unit
}

// writeRetry writes an answer with Retry-After: the 429, the 503 and the
// penalty's 403.
func writeRetry(w http.ResponseWriter, status int, code, lead string, wait time.Duration) {
	secs := retrySeconds(wait)
	body, err := json.Marshal(answer{Error: code, Message: retryMessage(lead, secs), RetryAfter: secs})
	if err != nil { // cannot happen: three plain fields
		body = []byte(bodyInternal)
		status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set(headerRetryAfter, strconv.FormatInt(secs, 10))
	writeJSON(w, status, body)
}

// writeJSON writes status and body as application/json.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a client gone away is not the middleware's error
}

// DefaultOnError is what the middleware does with a request it could not
// check when Config.OnError is nil (it also logs a 500 to Config.Logger): it
// answers 400 Bad Request for a malformed client key (err wraps
// httpkey.ErrMalformed: the client's fault) and 500 Internal Server Error
// otherwise (a configuration or rule mistake), with a JSON body
// {"error": CodeBadRequest or CodeInternal, "message": ...} that does not
// echo err, since it may name headers or rules a client need not see.
//
// A custom OnError can log or count err and then call DefaultOnError. It is
// safe for concurrent use.
func DefaultOnError(w http.ResponseWriter, _ *http.Request, err error) {
	if errors.Is(err, httpkey.ErrMalformed) {
		writeJSON(w, http.StatusBadRequest, []byte(bodyBadRequest))
		return
	}
	writeJSON(w, http.StatusInternalServerError, []byte(bodyInternal))
}
