package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"github.com/hybridlimit/hybridlimit/limit"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Kinds of Redis fault. Every error this package returns wraps exactly one,
// so callers branch with errors.Is; the underlying error is wrapped too.
var (
	// ErrUnavailable: Redis cannot be reached or cannot serve: connection
	// refused or reset, a closed client, a cluster that is down or still
	// moving slots after its redirects ran out, a replica that is loading.
	ErrUnavailable = errors.New("remote: redis unavailable")
	// ErrTimeout: Redis did not answer within the call's deadline.
	ErrTimeout = errors.New("remote: redis timeout")
	// ErrOOM: Redis refused the write because maxmemory is reached.
	ErrOOM = errors.New("remote: redis out of memory")
	// ErrWrongType: the key holds a value of another type: someone else's
	// data under our name.
	ErrWrongType = errors.New("remote: key holds another type")
	// ErrBadReply: Redis answered with something our scripts never return.
	ErrBadReply = errors.New("remote: unexpected reply")
	// ErrRedis: any other error reply.
	ErrRedis = errors.New("remote: redis error")
	// ErrCanceled: the caller's context was canceled: not Redis's fault.
	ErrCanceled = errors.New("remote: canceled")
)

// Error is a Redis fault with the operation and key it happened on.
type Error struct {
	Kind error  // one of the Err* kinds
	Op   string // "allow", "reserve", "reconcile", "load"
	Key  string // the caller's key, if the fault is about one
	Err  error  // what go-redis or the reply said
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	b.WriteString(": ")
	b.WriteString(e.Op)
	if e.Key != "" {
		b.WriteString(" ")
		b.WriteString(e.Key)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap lets errors.Is see both the kind and the underlying error.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

// classify wraps err, which came from op on key, with its kind.
func classify(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var own *Error
	if errors.As(err, &own) {
		return err
	}
	return &Error{Kind: kindOf(err), Op: op, Key: key, Err: err}
}

// kindOf sorts a go-redis error into one of the kinds.
func kindOf(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ErrTimeout
	case errors.Is(err, context.Canceled):
		return ErrCanceled
	}
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		return ErrTimeout
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "OOM"):
			return ErrOOM
		case strings.HasPrefix(msg, "WRONGTYPE"):
			return ErrWrongType
		case strings.HasPrefix(msg, "CLUSTERDOWN"), strings.HasPrefix(msg, "MOVED"), strings.HasPrefix(msg, "ASK"),
			strings.HasPrefix(msg, "TRYAGAIN"), strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "MASTERDOWN"),
			strings.HasPrefix(msg, "READONLY"), strings.HasPrefix(msg, "BUSY"):
			return ErrUnavailable
		}
		return ErrRedis
	}
	switch {
	case errors.Is(err, redis.ErrClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed):
		return ErrUnavailable
	}
	var operr *net.OpError
	if errors.As(err, &operr) {
		return ErrUnavailable
	}
	// A TLS handshake that fails (a certificate not trusted, a protocol
	// mismatch) leaves no connection to Redis, as a refused dial does.
	var (
		certErr   *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		alert     tls.AlertError
		recordErr tls.RecordHeaderError
	)
	if errors.As(err, &certErr) || errors.As(err, &unknownCA) || errors.As(err, &hostErr) ||
		errors.As(err, &alert) || errors.As(err, &recordErr) {
		return ErrUnavailable
	}
	// go-redis reports replies it cannot read, pool exhaustion and dial
	// failures as plain errors.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "can't parse"), strings.Contains(msg, "invalid reply"), strings.Contains(msg, "unexpected type"):
		return ErrBadReply
	case strings.Contains(msg, "connection pool"), strings.Contains(msg, "dial"):
		return ErrUnavailable
	}
	return ErrRedis
}

// IsKeyFault reports whether err is about one key rather than about Redis:
// Redis answered sanely, so a circuit breaker should not count it as a
// failure. Only ErrWrongType is: a garbage reply says Redis (or whatever
// answers in its place) is not healthy.
func IsKeyFault(err error) bool { return errors.Is(err, ErrWrongType) }

// IsUnreportable reports whether err refuses a report for what it carries,
// before any call to Redis: a limit Async mode cannot share (the sliding
// window log, a calendar window), an invalid limit or key. Sending it again
// can never succeed, and Redis has done nothing wrong.
func IsUnreportable(err error) bool {
	return errors.Is(err, ErrNotReconcilable) || errors.Is(err, limit.ErrInvalidLimit) || errors.Is(err, limit.ErrInvalidKey)
}
