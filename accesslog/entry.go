// Package accesslog reads HTTP access logs in the formats operators have,
// for replaying yesterday's traffic through rules (package replay): the
// Common and Combined Log Formats of nginx and Apache, and JSON lines with
// field names of the caller's choosing (Envoy's JSON access log, or any
// other), each plain or gzip-compressed. A line it cannot read is counted
// and kept as an example, never fatal; a file it cannot read is an error.
//
// A Reader reads one file, oldest line first as written; Merge reads
// several at once (the rotated logs of one server, or the logs of a
// fleet's servers) in the order of their timestamps.
package accesslog

import (
	"fmt"
	"strings"
	"time"
)

// Entry is one request of an access log.
type Entry struct {
	// Time is when the request was logged, and Resolution how precisely:
	// a second for the Common and Combined formats, as many fractional
	// digits as a JSON timestamp carries.
	Time       time.Time
	Resolution time.Duration
	// Method is the request's method ("GET"), and Target its request
	// target as logged: the path, with any query.
	Method, Target string
	// Status is the response's status code; 0 when the log has none.
	Status int
	// RemoteAddr is the address of the peer that sent the request (the
	// Common format's first field), with or without a port.
	RemoteAddr string
	// ForwardedFor is the X-Forwarded-For header the request came with,
	// where the log has it; "" otherwise.
	ForwardedFor string
	// User, Tier and APIKey are the authenticated user, the client's tier
	// and its API key, where the log has them; "" otherwise. The Common
	// format's user field ("-" for none) is User.
	User, Tier, APIKey string
}

// Format is an access log's format.
type Format int

// The formats.
const (
	// Auto reads each file as JSON lines if its first line that is not
	// blank starts with '{', else in the Common or Combined Log Format. The
	// zero value.
	Auto Format = iota
	// Combined is the Combined Log Format (nginx's "combined", Apache's
	// "%h %l %u %t \"%r\" %>s %b \"%{Referer}i\" \"%{User-agent}i\""), and
	// the Common Log Format, which is its first seven fields. A quoted
	// field after the user agent is read as X-Forwarded-For, as nginx's
	// default "main" format writes it.
	Combined
	// JSON is one JSON object a line; Options.Fields names the fields.
	JSON
)

// ParseFormat reads a Format's name: "auto", "combined" (or "common",
// "clf") and "json".
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return Auto, nil
	case "combined", "common", "clf":
		return Combined, nil
	case "json":
		return JSON, nil
	}
	return Auto, fmt.Errorf("accesslog: unknown format %q (want auto, combined or json)", s)
}

func (f Format) String() string {
	switch f {
	case Auto:
		return "auto"
	case Combined:
		return "combined"
	case JSON:
		return "json"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// Fields names the fields of a JSON access log that an Entry is read from.
// A name may be a path into nested objects, its parts joined by dots
// ("request.method"). An empty name reads nothing. Time, Method and the
// path (Path or Request) are required; the rest are read when present.
type Fields struct {
	// Time holds when the request was logged: an RFC 3339 string (with any
	// fraction of a second), or a number of Unix seconds (with a fraction,
	// or not), milliseconds, microseconds or nanoseconds, told apart by
	// their size (more than 1e17 is nanoseconds, 1e14 microseconds, 1e11
	// milliseconds).
	Time string
	// Method and Path hold the request's method and target; Request, when
	// Method or Path is missing, holds a request line ("GET /x HTTP/1.1")
	// to take them from.
	Method, Path, Request string
	// Status holds the response's status code, a number or a string.
	Status string
	// RemoteAddr holds the peer's address, with or without a port.
	RemoteAddr string
	// ForwardedFor holds the X-Forwarded-For header.
	ForwardedFor string
	// User, Tier and APIKey hold the authenticated user, the tier and the
	// API key.
	User, Tier, APIKey string
}

// EnvoyFields returns the field names of Envoy's JSON access log as Istio
// and most configurations write it, which a Reader reads JSON with by
// default.
func EnvoyFields() Fields {
	return Fields{
		Time:         "start_time",
		Method:       "method",
		Path:         "path",
		Status:       "response_code",
		RemoteAddr:   "downstream_remote_address",
		ForwardedFor: "x_forwarded_for",
	}
}

// ParseFields reads field names written as "name=field,..." over base: the
// names are time, method, path, request, status, remote_addr,
// x_forwarded_for, user, tier and api_key; a field left empty ("user=")
// reads nothing.
func ParseFields(s string, base Fields) (Fields, error) {
	f := base
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, field, ok := strings.Cut(part, "=")
		if !ok {
			return f, fmt.Errorf("accesslog: field %q: want name=field", part)
		}
		dst, ok := map[string]*string{"time": &f.Time, "method": &f.Method, "path": &f.Path, "request": &f.Request,
			"status": &f.Status, "remote_addr": &f.RemoteAddr, "x_forwarded_for": &f.ForwardedFor, "user": &f.User,
			"tier": &f.Tier, "api_key": &f.APIKey}[strings.ToLower(strings.TrimSpace(name))]
		if !ok {
			return f, fmt.Errorf("accesslog: field %q: unknown name %q (want time, method, path, request, status, remote_addr, x_forwarded_for, user, tier or api_key)", part, name)
		}
		*dst = strings.TrimSpace(field)
	}
	if f.Time == "" || (f.Path == "" || f.Method == "") && f.Request == "" {
		return f, fmt.Errorf("accesslog: fields %q: time, and method and path (or request), are required", s)
	}
	return f, nil
}

// Options configure a Reader. The zero value reads either format, JSON
// with EnvoyFields'.
type Options struct {
	// Format is the files' format. The zero value, Auto, tells each file's
	// from its first line.
	Format Format
	// Fields names a JSON log's fields. The zero value means EnvoyFields'.
	Fields Fields
	// Examples is how many malformed lines a Reader keeps as examples.
	// Zero means 5.
	Examples int
}
