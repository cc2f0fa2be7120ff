package accesslog

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"time"
)

// A line of the Combined Log Format:
//
//	203.0.113.7 - alice [10/Oct/2026:13:55:36 -0700] "GET /a?b=1 HTTP/1.1" 200 2326 "https://x/" "curl/8.5" "198.51.100.9"
//
// host, ident, user, [time], "request", status, bytes; then, where the
// format has them, "referer", "user agent" and "X-Forwarded-For". The Common
// Log Format stops after bytes. Quoted fields escape '"' as \" (Apache) or
// \x22 (nginx); both are read.

// parseCombined reads line into e.
func parseCombined(line []byte, e *Entry) error {
	rest := line
	host, rest, ok := field(rest)
	if !ok {
		return errors.New("no client address")
	}
	if _, rest, ok = field(rest); !ok { // ident
		return errors.New("no ident field")
	}
	user, rest, ok := field(rest)
	if !ok {
		return errors.New("no user field")
	}
	if len(rest) == 0 || rest[0] != '[' {
		return errors.New("no [time]")
	}
	end := bytes.IndexByte(rest, ']')
	if end < 0 {
		return errors.New("no ] after the time")
	}
	t, err := parseCLFTime(rest[1:end])
	if err != nil {
		return err
	}
	rest = skipSpace(rest[end+1:])
	request, rest, err := quoted(rest)
	if err != nil {
		return errors.New("request line: " + err.Error())
	}
	method, target, ok := requestLine(request)
	if !ok {
		return errors.New("request line " + strconv.Quote(request) + ": want METHOD TARGET [PROTOCOL]")
	}
	status, rest, ok := field(rest)
	if !ok {
		return errors.New("no status")
	}
	code, err := strconv.Atoi(string(status))
	if err != nil || code < 100 || code > 999 {
		return errors.New("status " + strconv.Quote(string(status)) + ": want a number of three digits")
	}
	// bytes, then the quoted fields of the Combined format, if any; what
	// follows them, or any field unquoted, is not read.
	_, rest, _ = field(rest)
	var xff string
	for i := 0; len(rest) > 0 && rest[0] == '"' && i < 3; i++ {
		var v string
		if v, rest, err = quoted(rest); err != nil {
			return errors.New("quoted field " + strconv.Itoa(i+1) + " after the status: " + err.Error())
		}
		if i == 2 && v != "-" {
			xff = v
		}
	}
	*e = Entry{Time: t, Resolution: time.Second, Method: method, Target: target, Status: code,
		RemoteAddr: string(host), ForwardedFor: xff}
	if u := string(user); u != "-" {
		e.User = u
	}
	return nil
}

// field returns the bytes up to the next space, and what follows the spaces
// after it.
func field(b []byte) (f, rest []byte, ok bool) {
	b = skipSpace(b)
	if len(b) == 0 {
		return nil, nil, false
	}
	i := bytes.IndexByte(b, ' ')
	if i < 0 {
		return b, nil, true
	}
	return b[:i], skipSpace(b[i+1:]), true
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// quoted reads a double-quoted field at the start of b, unescaping \" and
// \\ (Apache) and \xHH (nginx), and returns what follows it.
func quoted(b []byte) (string, []byte, error) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, errors.New("want a quoted field")
	}
	// Most fields escape nothing: the bytes up to the closing quote.
	end := bytes.IndexByte(b[1:], '"')
	if end >= 0 && bytes.IndexByte(b[1:1+end], '\\') < 0 {
		return string(b[1 : 1+end]), skipSpace(b[2+end:]), nil
	}
	var sb strings.Builder
	for i := 1; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			return sb.String(), skipSpace(b[i+1:]), nil
		case '\\':
			if i+1 >= len(b) {
				return "", nil, errors.New("unterminated quoted field")
			}
			i++
			switch b[i] {
			case 'x':
				if i+2 < len(b) {
					if v, err := strconv.ParseUint(string(b[i+1:i+3]), 16, 8); err == nil {
						sb.WriteByte(byte(v))
						i += 2
						continue
					}
				}
				sb.WriteString(`\x`)
			case 'n':
				sb.WriteByte('\n')
			case 't':
				sb.WriteByte('\t')
			default:
				sb.WriteByte(b[i])
			}
		default:
			sb.WriteByte(c)
		}
	}
	return "", nil, errors.New("unterminated quoted field")
}

// requestLine splits "GET /a HTTP/1.1" into its method and target.
func requestLine(s string) (method, target string, ok bool) {
	method, rest, ok := strings.Cut(s, " ")
	if !ok || method == "" {
		return "", "", false
	}
	target, _, _ = strings.Cut(rest, " ")
	if target == "" || strings.ContainsAny(method, "\"\t") {
		return "", "", false
	}
	return method, target, true
}

// clfMonths are the months as the Common Log Format writes them, three
// letters each.
const clfMonths = "JanFebMarAprMayJunJulAugSepOctNovDec"

// parseCLFTime reads "10/Oct/2026:13:55:36 -0700", as time.Parse would with
// the layout "02/Jan/2006:15:04:05 -0700", without allocating.
func parseCLFTime(b []byte) (time.Time, error) {
	bad := func() (time.Time, error) {
		return time.Time{}, errors.New("time " + strconv.Quote(string(b)) + ": want 02/Jan/2006:15:04:05 -0700")
	}
	if len(b) != 26 || b[2] != '/' || b[6] != '/' || b[11] != ':' || b[14] != ':' || b[17] != ':' || b[20] != ' ' {
		return bad()
	}
	month := -1
	for i := 0; i < len(clfMonths); i += 3 {
		if string(b[3:6]) == clfMonths[i:i+3] {
			month = i/3 + 1
		}
	}
	day, ok1 := digits(b[0:2])
	year, ok2 := digits(b[7:11])
	hour, ok3 := digits(b[12:14])
	minute, ok4 := digits(b[15:17])
	sec, ok5 := digits(b[18:20])
	zh, ok6 := digits(b[22:24])
	zm, ok7 := digits(b[24:26])
	sign := b[21]
	if month < 0 || !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || sign != '+' && sign != '-' ||
		day < 1 || day > 31 || hour > 23 || minute > 59 || sec > 60 || zm > 59 {
		return bad()
	}
	offset := time.Duration(zh)*time.Hour + time.Duration(zm)*time.Minute
	if sign == '-' {
		offset = -offset
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC).Add(-offset), nil
}

// digits reads b as a decimal number.
func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, len(b) > 0
}
