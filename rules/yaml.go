package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Parse reads a YAML configuration (see the package documentation for its
// shape) and validates it. It reports every problem it finds, up to
// MaxErrors, as ConfigErrors joined with errors.Join, each naming its line,
// column and field path; on any problem it returns a nil Config.
func Parse(data []byte) (*Config, error) { return parse(data, "") }

// ParseFile is Parse on the contents of the file at path; its errors name
// the file. A file over DefaultMaxFileSize is refused with a
// *FileSizeError before it is parsed.
func ParseFile(path string) (*Config, error) {
	data, err := readFile(path, 0)
	if err != nil {
		return nil, err
	}
	return parse(data, path)
}

func parse(data []byte, file string) (*Config, error) {
	doc, perr := decodeDocument(data)
	if perr != nil {
		perr.File = file
		return nil, perr
	}
	var p problems
	w := walker{p: &p}
	cfg := w.document(doc)
	cfg.validate(&p)
	if err := p.err(file); err != nil {
		return nil, err
	}
	return cfg, nil
}

// decodeDocument parses data into its single YAML document.
func decodeDocument(data []byte) (doc *yaml.Node, cerr *ConfigError) {
	defer func() {
		// The YAML parser is not ours: a panic in it is a bad document,
		// not a crash of the service reloading it.
		if r := recover(); r != nil {
			doc, cerr = nil, &ConfigError{Msg: fmt.Sprintf("invalid YAML: parser failed: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ConfigError{Msg: "empty configuration: want a rate_limits mapping"}
		}
		return nil, yamlError(err, data)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &ConfigError{Line: extra.Line, Column: extra.Column, Msg: "more than one YAML document"}
	case !errors.Is(err, io.EOF):
		return nil, yamlError(err, data)
	}
	return &n, nil
}

// yamlError turns the parser's "yaml: line N: msg" into a ConfigError.
//
// yaml.v3 reports a scanner error's line 1-based but a parser error's
// 0-based (it adds one only for scanner errors), so the parser's problems,
// which are few and fixed, get the one added here; the result is the line
// where the unfinished construct (such as an unclosed bracket) starts.
func yamlError(err error, data []byte) *ConfigError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &ConfigError{Err: err}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if line, convErr := strconv.Atoi(num); convErr == nil {
				if isParserProblem(tail) {
					line = min(line+1, bytes.Count(data, []byte("\n"))+1)
				}
				e.Line, msg = line, tail
			}
		}
	}
	e.Msg = "invalid YAML: " + msg
	return e
}

// isParserProblem reports whether msg is one of yaml.v3's parser (not
// scanner) problems.
func isParserProblem(msg string) bool {
	switch msg {
	case "did not find expected ',' or ']'",
		"did not find expected ',' or '}'",
		"did not find expected '-' indicator",
		"did not find expected <document start>",
		"did not find expected <stream-start>",
		"did not find expected key",
		"did not find expected node content",
		"found duplicate %TAG directive",
		"found duplicate %YAML directive",
		"found incompatible YAML document",
		"found undefined tag handle":
		return true
	}
	return false
}

// walker reads the YAML node tree into a Config, recording every problem.
type walker struct {
	p *problems
}

func at(n *yaml.Node) origin { return origin{line: n.Line, col: n.Column, raw: n.Value} }

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return strconv.Quote(n.Value)
	}
	return "an unexpected node"
}

// fields calls each for every key of the mapping n, with its resolved value
// (nil for null, which reads as absent). It reports a non-mapping, keys that
// are not strings, duplicate keys and merge keys. It returns false if n is
// not a mapping, or holds a merge key.
func (w *walker) fields(n *yaml.Node, path string, each func(key string, k, v *yaml.Node)) bool {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		if n == nil {
			n = &yaml.Node{}
		}
		w.p.add(at(n), path, "want a mapping, got %s", describe(n))
		return false
	}
	seen := make(map[string]int, len(n.Content)/2)
	merged := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode {
			w.p.add(at(n.Content[i]), path, "keys must be strings")
			continue
		}
		if k.ShortTag() == "!!merge" {
			w.p.add(at(k), path, "merge keys (<<) are not supported; repeat the fields or use an alias for the whole value")
			merged = true
			continue
		}
		if first, dup := seen[k.Value]; dup {
			w.p.add(at(k), fieldPath(path, k.Value), "duplicate key, first at line %d", first)
			continue
		}
		seen[k.Value] = k.Line
		if isNull(v) {
			v = nil
		}
		each(k.Value, k, v)
	}
	// A mapping with a merge key lacks the merged fields: say nothing more
	// about what it lacks.
	return !merged
}

func (w *walker) unknown(k *yaml.Node, path string, known string) {
	w.p.add(at(k), path, "unknown field, want one of %s", known)
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func (w *walker) document(doc *yaml.Node) *Config {
	cfg := &Config{}
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	found := false
	ok := w.fields(root, "", func(key string, k, v *yaml.Node) {
		if key != "rate_limits" {
			w.unknown(k, key, "rate_limits")
			return
		}
		found = true
		if v == nil {
			w.p.add(at(k), key, "want a mapping, got null")
			return
		}
		w.rateLimits(v, cfg)
	})
	if ok && !found {
		w.p.add(at(resolve(root)), "rate_limits", "required")
	}
	return cfg
}

const rateLimitsFields = "enabled, shadow, default, global, per_ip, per_user, endpoints, tiers, ban, penalty, priority"

func (w *walker) rateLimits(n *yaml.Node, cfg *Config) {
	const base = "rate_limits"
	w.fields(n, base, func(key string, k, v *yaml.Node) {
		path := join(base, key)
		if v == nil {
			switch key {
			case "enabled", "shadow", "default", "global", "per_ip", "per_user", "endpoints", "tiers", "ban", "penalty", "priority":
			default:
				w.unknown(k, path, rateLimitsFields)
			}
			return
		}
		switch key {
		case "enabled":
			if b, ok := w.bool(v, path); ok {
				cfg.Disabled = !b
			}
		case "shadow":
			cfg.Shadow, _ = w.bool(v, path)
		case "default":
			cfg.Default = w.rulePtr(k, v, path)
		case "global":
			cfg.Global = w.rulePtr(k, v, path)
		case "per_ip":
			cfg.PerIP = w.rulePtr(k, v, path)
		case "per_user":
			cfg.PerUser = w.rulePtr(k, v, path)
		case "endpoints":
			cfg.Endpoints = w.ruleMap(v, path)
		case "tiers":
			cfg.Tiers = w.ruleMap(v, path)
		case "ban":
			cfg.Ban = w.ban(v, path)
		case "penalty":
			cfg.Penalty = w.penalty(k, v, path)
		case "priority":
			w.fields(v, path, func(key string, k, v *yaml.Node) {
				path := join(path, key)
				if key != "reserve" {
					w.unknown(k, path, "reserve")
					return
				}
				if v != nil {
					cfg.Reserve, cfg.reserveAt = w.fraction(v, path)
				}
			})
		default:
			w.unknown(k, path, rateLimitsFields)
		}
	})
}

func (w *walker) rulePtr(k, v *yaml.Node, path string) *Rule {
	r := w.rule(k, v, path)
	return &r
}

func (w *walker) ruleMap(n *yaml.Node, path string) map[string]Rule {
	m := make(map[string]Rule)
	w.fields(n, path, func(key string, k, v *yaml.Node) {
		p := fieldPath(path, key)
		if v == nil {
			w.p.add(at(k), p, "want a rule, got null")
			return
		}
		m[key] = w.rule(k, v, p)
	})
	return m
}

const ruleFields = "requests, window, zone, algorithm, burst, shadow"

// rule reads one rule. key is the node naming it, whose position the rule's
// cross-field errors report.
func (w *walker) rule(key, n *yaml.Node, path string) Rule {
	r := Rule{at: ruleOrigins{rule: at(key)}}
	r.at.rule.raw = ""
	var hasRequests, hasWindow, hasAlgorithm bool
	ok := w.fields(n, path, func(name string, k, v *yaml.Node) {
		fp := join(path, name)
		if v == nil {
			switch name {
			case "requests", "window", "zone", "algorithm", "burst", "shadow":
			default:
				w.unknown(k, fp, ruleFields)
			}
			return
		}
		switch name {
		case "requests":
			hasRequests = true
			r.Requests, r.at.requests = w.int(v, fp)
		case "window":
			hasWindow = true
			if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
				if c, err := limit.ParseCalendar(v.Value); err == nil {
					r.Calendar, r.at.window = c, at(v)
					return
				}
			}
			r.Window, r.at.window = w.seconds(v, fp)
		case "zone":
			if w.scalar(v, fp, "a time zone name") {
				r.Zone, r.at.zone = v.Value, at(v)
			}
		case "algorithm":
			hasAlgorithm = true
			r.Algorithm, r.at.algorithm = w.algorithm(v, fp)
		case "burst":
			r.Burst, r.at.burst = w.int(v, fp)
			if !r.at.burst.bad && r.Burst <= 0 {
				w.p.add(r.at.burst, fp, "must be positive, got %d (omit burst for a burst equal to requests)", r.Burst)
				r.at.burst.bad = true
			}
		case "shadow":
			r.Shadow, _ = w.bool(v, fp)
		default:
			w.unknown(k, fp, ruleFields)
		}
	})
	if !ok {
		// Nothing more to say about a rule that is not a mapping.
		r.at.requests.bad, r.at.window.bad = true, true
		return r
	}
	if !hasRequests {
		w.p.add(r.at.rule, join(path, "requests"), "required")
		r.at.requests.bad = true
	}
	if !hasWindow {
		w.p.add(r.at.rule, join(path, "window"), "required")
		r.at.window.bad = true
	}
	if r.Calendar != limit.NoCalendar && !hasAlgorithm {
		r.Algorithm = limit.FixedWindow // a quota per calendar unit
	}
	return r
}

func (w *walker) ban(n *yaml.Node, path string) []netip.Prefix {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		w.p.add(at(n), path, "want a sequence of addresses and CIDRs, got %s", describe(n))
		return nil
	}
	out := make([]netip.Prefix, 0, len(n.Content))
	for i, item := range n.Content {
		item = resolve(item)
		p := fmt.Sprintf("%s[%d]", path, i)
		if item == nil || item.Kind != yaml.ScalarNode || isNull(item) {
			if item == nil {
				item = n
			}
			w.p.add(at(item), p, "want an address or CIDR, got %s", describe(item))
			continue
		}
		pfx, err := parseBan(item.Value)
		if err != nil {
			w.p.add(at(item), p, "%v", err)
			continue
		}
		out = append(out, pfx)
	}
	return out
}

const penaltyFields = "strikes, within, base, max"

func (w *walker) penalty(key, n *yaml.Node, path string) *PenaltyConfig {
	pc := &PenaltyConfig{at: penaltyOrigins{block: at(key)}}
	pc.at.block.raw = ""
	have := map[string]bool{}
	ok := w.fields(n, path, func(name string, k, v *yaml.Node) {
		fp := join(path, name)
		switch name {
		case "strikes", "within", "base", "max":
			if v == nil {
				return
			}
			have[name] = true
		default:
			w.unknown(k, fp, penaltyFields)
			return
		}
		switch name {
		case "strikes":
			var s int64
			s, pc.at.strikes = w.int(v, fp)
			if s >= 1 && s <= MaxStrikes {
				pc.Strikes = int(s)
			} // else zero: out of range, which validate reports with the text as written
		case "within":
			pc.Within, pc.at.within = w.seconds(v, fp)
		case "base":
			pc.Base, pc.at.base = w.seconds(v, fp)
		case "max":
			pc.Max, pc.at.max = w.seconds(v, fp)
		}
	})
	for _, f := range []struct {
		name string
		o    *origin
	}{{"strikes", &pc.at.strikes}, {"within", &pc.at.within}, {"base", &pc.at.base}, {"max", &pc.at.max}} {
		if !ok {
			f.o.bad = true
			continue
		}
		if !have[f.name] {
			w.p.add(pc.at.block, join(path, f.name), "required")
			f.o.bad = true
		}
	}
	return pc
}

// scalar reports a non-scalar node and returns false.
func (w *walker) scalar(n *yaml.Node, path, want string) bool {
	if n.Kind != yaml.ScalarNode {
		w.p.add(at(n), path, "want %s, got %s", want, describe(n))
		return false
	}
	return true
}

func (w *walker) bool(n *yaml.Node, path string) (bool, bool) {
	var b bool
	if !w.scalar(n, path, "true or false") {
		return false, false
	}
	if n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		w.p.add(at(n), path, "want true or false, got %q", n.Value)
		return false, false
	}
	return b, true
}

func (w *walker) int(n *yaml.Node, path string) (int64, origin) {
	o := at(n)
	o.bad = true
	if !w.scalar(n, path, "an integer") {
		return 0, o
	}
	var v int64
	switch n.ShortTag() {
	case "!!int":
		if err := n.Decode(&v); err != nil {
			w.p.add(o, path, "integer %s is out of range", n.Value)
			return 0, o
		}
	case "!!float":
		if strings.Trim(n.Value, "+-0123456789_") == "" {
			w.p.add(o, path, "integer %s is out of range", n.Value)
		} else {
			w.p.add(o, path, "want a whole number, got %s", n.Value)
		}
		return 0, o
	default:
		w.p.add(o, path, "want an integer, got %q", n.Value)
		return 0, o
	}
	o.bad = false
	return v, o
}

func (w *walker) seconds(n *yaml.Node, path string) (time.Duration, origin) {
	o := at(n)
	o.bad = true
	if !w.scalar(n, path, "seconds or a duration") {
		return 0, o
	}
	var d time.Duration
	switch n.ShortTag() {
	case "!!int":
		var s int64
		ok := n.Decode(&s) == nil
		if ok {
			d, ok = secondsDuration(s)
		}
		if !ok {
			w.p.add(o, path, "%s seconds is out of range", n.Value)
			return 0, o
		}
	case "!!float", "!!str":
		var err error
		if d, err = parseSeconds(n.Value); err != nil {
			w.p.add(o, path, "%v", err)
			return 0, o
		}
	default:
		w.p.add(o, path, "want seconds or a duration such as \"1m\", got %q", n.Value)
		return 0, o
	}
	o.bad = false
	return d, o
}

func (w *walker) algorithm(n *yaml.Node, path string) (limit.Algorithm, origin) {
	o := at(n)
	o.bad = true
	if !w.scalar(n, path, "an algorithm name") {
		return 0, o
	}
	a, err := parseAlgorithm(n.Value)
	if err != nil {
		w.p.add(o, path, "%v", err)
		return 0, o
	}
	o.bad = false
	return a, o
}

func (w *walker) fraction(n *yaml.Node, path string) (float64, origin) {
	o := at(n)
	o.bad = true
	if !w.scalar(n, path, "a number") {
		return 0, o
	}
	var f float64
	switch n.ShortTag() {
	case "!!int", "!!float":
		if err := n.Decode(&f); err != nil {
			w.p.add(o, path, "want a number, got %q", n.Value)
			return 0, o
		}
	default:
		w.p.add(o, path, "want a number, got %q", n.Value)
		return 0, o
	}
	o.bad = false
	return f, o
}
