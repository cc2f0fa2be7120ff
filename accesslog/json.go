package accesslog

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// jsonFields is Fields with each name split into its path.
type jsonFields struct {
	time, method, path, request, status, remoteAddr, forwardedFor, user, tier, apiKey []string
}

func newJSONFields(f Fields) jsonFields {
	split := func(name string) []string {
		if name == "" {
			return nil
		}
		return strings.Split(name, ".")
	}
	return jsonFields{time: split(f.Time), method: split(f.Method), path: split(f.Path), request: split(f.Request),
		status: split(f.Status), remoteAddr: split(f.RemoteAddr), forwardedFor: split(f.ForwardedFor),
		user: split(f.User), tier: split(f.Tier), apiKey: split(f.APIKey)}
}

// parseJSON reads one JSON object into e.
func parseJSON(line []byte, f *jsonFields, e *Entry) error {
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil {
		return errors.New("not a JSON object: " + err.Error())
	}
	if d.More() {
		return errors.New("more than one JSON value on the line")
	}
	name := func(path []string) string { return strings.Join(path, ".") }
	raw, ok := lookup(obj, f.time)
	if !ok {
		return errors.New("no time field " + strconv.Quote(name(f.time)))
	}
	t, res, err := jsonTime(raw)
	if err != nil {
		return errors.New("time field " + strconv.Quote(name(f.time)) + ": " + err.Error())
	}
	*e = Entry{Time: t, Resolution: res}
	e.Method, _ = text(obj, f.method)
	e.Target, _ = text(obj, f.path)
	if e.Method == "" || e.Target == "" {
		if line, ok := text(obj, f.request); ok {
			e.Method, e.Target, _ = requestLine(line)
		}
	}
	if e.Method == "" || e.Target == "" {
		return errors.New("no method and path (fields " + strconv.Quote(name(f.method)) + " and " + strconv.Quote(name(f.path)) +
			", or a request line in " + strconv.Quote(name(f.request)) + ")")
	}
	if s, ok := text(obj, f.status); ok && s != "" {
		if e.Status, err = strconv.Atoi(s); err != nil {
			return errors.New("status field " + strconv.Quote(name(f.status)) + ": " + strconv.Quote(s) + " is not a number")
		}
	}
	e.RemoteAddr, _ = text(obj, f.remoteAddr)
	e.ForwardedFor, _ = text(obj, f.forwardedFor)
	e.User, _ = text(obj, f.user)
	e.Tier, _ = text(obj, f.tier)
	e.APIKey, _ = text(obj, f.apiKey)
	if e.ForwardedFor == "-" {
		e.ForwardedFor = "" // Envoy writes "-" for a header the request lacked
	}
	return nil
}

// lookup finds the value at path in obj.
func lookup(obj map[string]any, path []string) (any, bool) {
	if len(path) == 0 {
		return nil, false
	}
	var v any = obj
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[p]; !ok {
			return nil, false
		}
	}
	return v, v != nil
}

// text is the value at path as text: a string as it is, a number as
// written.
func text(obj map[string]any, path []string) (string, bool) {
	v, ok := lookup(obj, path)
	if !ok {
		return "", false
	}
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}

// jsonTime reads a timestamp and how precisely it is given.
func jsonTime(v any) (time.Time, time.Duration, error) {
	switch v := v.(type) {
	case string:
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t, fractionResolution(v), nil
		}
		if t, err := parseCLFTime([]byte(v)); err == nil {
			return t, time.Second, nil
		}
		return time.Time{}, 0, errors.New(strconv.Quote(v) + ": want RFC 3339 (2026-10-10T13:55:36.123Z), 10/Oct/2026:13:55:36 -0700, or a number")
	case json.Number:
		f, err := v.Float64()
		if err != nil || f <= 0 || math.IsInf(f, 0) {
			return time.Time{}, 0, errors.New(strconv.Quote(v.String()) + ": want a positive number")
		}
		fraction := strings.ContainsAny(v.String(), ".eE")
		switch {
		case f > 1e17:
			n, err := v.Int64()
			if err != nil {
				n = int64(f)
			}
			return time.Unix(0, n).UTC(), time.Nanosecond, nil
		case f > 1e14:
			return time.UnixMicro(int64(f)).UTC(), time.Microsecond, nil
		case f > 1e11:
			return time.UnixMilli(int64(f)).UTC(), time.Millisecond, nil
		case fraction:
			sec, frac := math.Modf(f)
			return time.Unix(int64(sec), int64(math.Round(frac*1e6))*1000).UTC(), time.Millisecond, nil
		}
		return time.Unix(int64(f), 0).UTC(), time.Second, nil
	}
	return time.Time{}, 0, errors.New("want a string or a number")
}

// fractionResolution is how precisely an RFC 3339 timestamp gives its
// time: a second without a fraction, a tenth with one digit, and so on.
func fractionResolution(s string) time.Duration {
	dot := strings.IndexByte(s, '.')
	if dot < 0 {
		return time.Second
	}
	n := 0
	for _, c := range s[dot+1:] {
		if c < '0' || c > '9' {
			break
		}
		n++
	}
	res := time.Second
	for range min(n, 9) {
		res /= 10
	}
	return res
}
