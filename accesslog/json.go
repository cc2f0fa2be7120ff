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

// The fields of an Entry, as slots of jsonFields.
const (
	fTime = iota
	fMethod
	fPath
	fRequest
	fStatus
	fRemoteAddr
	fForwardedFor
	fUser
	fTier
	fAPIKey
	nFields
)

// jsonFields is Fields as the scanner reads them: each name's slot, and
// the objects on the way to a nested one.
type jsonFields struct {
	names    [nFields]string
	slot     map[string]int  // dotted name → slot
	prefixes map[string]bool // dotted names of objects holding a field
}

func newJSONFields(f Fields) jsonFields {
	jf := jsonFields{names: [nFields]string{f.Time, f.Method, f.Path, f.Request, f.Status, f.RemoteAddr, f.ForwardedFor, f.User, f.Tier, f.APIKey},
		slot: map[string]int{}, prefixes: map[string]bool{}}
	for i, name := range jf.names {
		if name == "" {
			continue
		}
		jf.slot[name] = i
		for j := range len(name) {
			if name[j] == '.' {
				jf.prefixes[name[:j]] = true
			}
		}
	}
	return jf
}

// jsonValue is a field's value as written: a string's bytes between its
// quotes, or a number's or literal's.
type jsonValue struct {
	raw      []byte
	str, set bool
}

// text is the value as text: a string unescaped, a number as written; ""
// for null.
func (v jsonValue) text() string {
	switch {
	case !v.set || !v.str && string(v.raw) == "null":
		return ""
	case !v.str || bytes.IndexByte(v.raw, '\\') < 0:
		return string(v.raw)
	}
	var s string
	quoted := make([]byte, 0, len(v.raw)+2)
	quoted = append(append(append(quoted, '"'), v.raw...), '"')
	_ = json.Unmarshal(quoted, &s) // valid: the line passed json.Valid
	return s
}

// parseJSON reads one JSON object into e. The line is checked whole with
// json.Valid, then scanned once for the fields wanted, without building the
// object.
func parseJSON(line []byte, f *jsonFields, e *Entry) error {
	line = bytes.TrimSpace(line)
	if !json.Valid(line) {
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			return errors.New("not a JSON object: " + err.Error())
		}
		return errors.New("not a JSON object") // json.Valid and Unmarshal disagree: never seen
	}
	if len(line) == 0 || line[0] != '{' {
		return errors.New("not a JSON object: a JSON value of another kind")
	}
	var vals [nFields]jsonValue
	f.scan(line, 0, "", &vals)
	name := func(slot int) string { return strconv.Quote(f.names[slot]) }
	tv := vals[fTime]
	if !tv.set || !tv.str && string(tv.raw) == "null" {
		return errors.New("no time field " + name(fTime))
	}
	var raw any = json.Number(tv.raw)
	if tv.str {
		raw = tv.text()
	}
	t, res, err := jsonTime(raw)
	if err != nil {
		return errors.New("time field " + name(fTime) + ": " + err.Error())
	}
	*e = Entry{Time: t, Resolution: res, Method: vals[fMethod].text(), Target: vals[fPath].text()}
	if e.Method == "" || e.Target == "" {
		if line := vals[fRequest].text(); line != "" {
			e.Method, e.Target, _ = requestLine(line)
		}
	}
	if e.Method == "" || e.Target == "" {
		return errors.New("no method and path (fields " + name(fMethod) + " and " + name(fPath) + ", or a request line in " + name(fRequest) + ")")
	}
	if s := vals[fStatus].text(); s != "" {
		if e.Status, err = strconv.Atoi(s); err != nil {
			return errors.New("status field " + name(fStatus) + ": " + strconv.Quote(s) + " is not a number")
		}
	}
	e.RemoteAddr = vals[fRemoteAddr].text()
	e.ForwardedFor = vals[fForwardedFor].text()
	e.User, e.Tier, e.APIKey = vals[fUser].text(), vals[fTier].text(), vals[fAPIKey].text()
	if e.ForwardedFor == "-" {
		e.ForwardedFor = "" // Envoy writes "-" for a header the request lacked
	}
	return nil
}

// scan reads the object that starts at b[i] (valid JSON), keeping in vals
// the members whose dotted names (under prefix) are wanted, and descending
// into the objects that hold some. It returns the index after the object.
func (f *jsonFields) scan(b []byte, i int, prefix string, vals *[nFields]jsonValue) int {
	i++ // '{'
	for {
		i = skipWS(b, i)
		if b[i] == '}' {
			return i + 1
		}
		if b[i] == ',' {
			i = skipWS(b, i+1)
		}
		kstart := i + 1
		i = skipString(b, i)
		key := b[kstart : i-1]
		i = skipWS(b, i) + 1 // ':'
		i = skipWS(b, i)
		var slot int
		var wanted, holds bool
		if prefix == "" { // a lookup by string(key) allocates nothing
			slot, wanted = f.slot[string(key)]
			holds = b[i] == '{' && f.prefixes[string(key)]
		} else {
			slot, wanted = f.slot[prefix+"."+string(key)]
			holds = b[i] == '{' && f.prefixes[prefix+"."+string(key)]
		}
		switch {
		case holds:
			i = f.scan(b, i, strings.TrimPrefix(prefix+"."+string(key), "."), vals)
		case wanted && b[i] == '"':
			end := skipString(b, i)
			vals[slot] = jsonValue{raw: b[i+1 : end-1], str: true, set: true}
			i = end
		case wanted && b[i] != '{' && b[i] != '[':
			end := skipValue(b, i)
			vals[slot] = jsonValue{raw: b[i:end], set: true}
			i = end
		default:
			i = skipValue(b, i)
		}
	}
}

// skipWS returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index after the value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(b) && !strings.ContainsRune(",}] \t\r\n", rune(b[i])) {
		i++
	}
	return i
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
