package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// curlRequest is the request a curl command line would send, as far as a
// rate limiter looks at it: its method, URL and headers. The line may start
// with "curl"; it is given as words, or as one string the shell did not
// split (then quotes and backslashes split it as a shell would).
//
// Understood: -X/--request, -H/--header, -A/--user-agent, -e/--referer,
// -I/--head, -G/--get, -d/--data (and --data-raw, --data-binary,
// --data-urlencode, -F/--form: a POST unless -X says otherwise), --url;
// options that change nothing a limiter sees (-s, -v, -L, -k, -i, -o FILE,
// -u USER, -m SECONDS, ...) are skipped. Anything else is an error rather
// than a guess.
func curlRequest(words []string) (*http.Request, error) {
	if len(words) == 1 && strings.ContainsAny(words[0], " \t\n") {
		var err error
		if words, err = shellWords(words[0]); err != nil {
			return nil, err
		}
	}
	if len(words) > 0 && words[0] == "curl" {
		words = words[1:]
	}
	method, target, data := "", "", false
	header := http.Header{}
	for i := 0; i < len(words); i++ {
		w := words[i]
		arg := func() (string, error) {
			if name, v, ok := strings.Cut(w, "="); ok && strings.HasPrefix(name, "--") {
				return v, nil
			}
			if i+1 >= len(words) {
				return "", fmt.Errorf("curl line: %s needs a value", w)
			}
			i++
			return words[i], nil
		}
		name, _, _ := strings.Cut(w, "=")
		switch {
		case !strings.HasPrefix(w, "-") || w == "-":
			if target != "" {
				return nil, fmt.Errorf("curl line: two URLs, %q and %q", target, w)
			}
			target = w
			continue
		case name == "-X" || name == "--request":
			v, err := arg()
			if err != nil {
				return nil, err
			}
			method = v
		case name == "-H" || name == "--header":
			v, err := arg()
			if err != nil {
				return nil, err
			}
			k, val, ok := strings.Cut(v, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, fmt.Errorf("curl line: header %q: want Name: value", v)
			}
			header.Add(strings.TrimSpace(k), strings.TrimSpace(val))
		case name == "-A" || name == "--user-agent", name == "-e" || name == "--referer":
			v, err := arg()
			if err != nil {
				return nil, err
			}
			h := "User-Agent"
			if name == "-e" || name == "--referer" {
				h = "Referer"
			}
			header.Set(h, v)
		case name == "--url":
			v, err := arg()
			if err != nil {
				return nil, err
			}
			target = v
		case name == "-I" || name == "--head":
			method = "HEAD"
		case name == "-G" || name == "--get":
			method = "GET"
		case name == "-d" || name == "-F" || strings.HasPrefix(name, "--data") || name == "--form" || name == "--json":
			if _, err := arg(); err != nil {
				return nil, err
			}
			data = true
		case curlQuiet(name):
		case curlSkip(name):
			if _, err := arg(); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("curl line: option %s is not understood (-X, -H, -d, --url and the like are)", w)
		}
	}
	if target == "" {
		return nil, fmt.Errorf("curl line: no URL")
	}
	if method == "" {
		method = "GET"
		if data {
			method = "POST"
		}
	}
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("curl line: URL %q: want http://host/path", target)
	}
	req, err := http.NewRequest(method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("curl line: %w", err)
	}
	req.Header = header
	req.RequestURI = u.RequestURI()
	return req, nil
}

// curlQuiet reports curl's options without a value that change nothing a
// rate limiter sees.
func curlQuiet(name string) bool {
	switch name {
	case "-s", "--silent", "-S", "--show-error", "-sS", "-v", "--verbose", "-k", "--insecure", "-L", "--location",
		"-i", "--include", "--compressed", "-f", "--fail", "-g", "--globoff", "-N", "--no-buffer":
		return true
	}
	return false
}

// curlSkip reports curl's options with a value that change nothing a rate
// limiter sees.
func curlSkip(name string) bool {
	switch name {
	case "-o", "--output", "-u", "--user", "-b", "--cookie", "-m", "--max-time", "--connect-timeout", "-w", "--write-out", "--retry":
		return true
	}
	return false
}

// shellWords splits s as a POSIX shell splits a simple command: on blanks,
// with '...' quoting everything, "..." quoting all but \ before " \ $ `,
// and \ escaping one character.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in := false // a word is being built
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words, in = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("curl line: unterminated ' quote")
			}
			cur.WriteString(s[i+1 : i+1+end])
			i, in = i+1+end, true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("curl line: unterminated \" quote")
			}
			in = true
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] != '\n' {
				cur.WriteByte(s[i])
				in = true
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
