package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The raw shape of one file, with where each part is written.

type rawFile struct {
	name        string
	domain      string
	domainAt    pos
	at          pos
	descriptors []*rawDescriptor
}

type rawDescriptor struct {
	at, keyAt, shareAt pos
	field              string
	key, value         string
	rateLimit          *rawRateLimit
	descriptors        []*rawDescriptor

	shadowMode, quotaMode, detailedMetric, valueToMetric, shareThreshold bool
}

type rawRateLimit struct {
	at, unitAt, algorithmAt, burstAt pos
	field                            string
	unit                             string
	requestsPerUnit                  uint32
	unlimited                        bool
	name                             string
	replaces                         []rawReplace
	algorithm                        string
	hasAlgorithm                     bool
	burst                            int64
	hasBurst                         bool
}

type rawReplace struct {
	at    pos
	field string
	name  string
}

// The keys each mapping may hold. envoyproxy/ratelimit accepts any of its
// keys at any level and ignores a misplaced one; here a misplaced key is an
// error, since the limit it was meant to set would silently not apply.
var (
	rootKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold"}
	rateLimitKeys  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst"}
	replacesKeys   = []string{"name"}
)

// parseFile reads one file's YAML into its raw shape, reporting problems.
func parseFile(name string, data []byte, p *problems) *rawFile {
	f := &rawFile{name: name, at: pos{file: name}}
	doc, err := decodeDocument(data)
	if err != nil {
		err.File = name
		p.list = append(p.list, err)
		return nil
	}
	w := walker{file: name, p: p}
	if doc == nil { // an empty file: no domain, reported by the loader
		return f
	}
	f.at = w.at(doc)
	w.mapping(doc, "", rootKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "domain":
			f.domain, f.domainAt = w.str(v, "domain"), w.at(v)
		case "descriptors":
			f.descriptors = w.descriptors(v, "descriptors")
		}
	})
	return f
}

// decodeDocument parses data into its first YAML document's root node, nil
// for an empty document.
func decodeDocument(data []byte) (doc *yaml.Node, cerr *Error) {
	defer func() {
		// The parser is not ours: a panic in it is a bad file, not a crash
		// of the service reloading it.
		if r := recover(); r != nil {
			doc, cerr = nil, &Error{Msg: fmt.Sprintf("invalid YAML: parser failed: %v", r)}
		}
	}()
	var n yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, yamlError(err)
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil, nil
		}
		return n.Content[0], nil
	}
	return &n, nil
}

// yamlError turns the parser's "yaml: line N: msg" into an Error.
func yamlError(err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if line, convErr := strconv.Atoi(num); convErr == nil {
				e.Line, msg = line, tail
			}
		}
	}
	e.Msg = "invalid YAML: " + msg
	return e
}

// walker reads YAML nodes, reporting problems with their position.
type walker struct {
	file string
	p    *problems
}

func (w *walker) at(n *yaml.Node) pos { return pos{file: w.file, line: n.Line, column: n.Column} }

func (w *walker) fail(n *yaml.Node, field, format string, args ...any) {
	w.p.add(w.at(n), field, format, args...)
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// kindName names a node's kind for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

// join appends a key to a field path.
func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

// mapping calls each for every key of the mapping n (merge keys, "<<",
// expanded) after checking that the key is a string, allowed, and not
// repeated. A null n is an empty mapping.
func (w *walker) mapping(n *yaml.Node, field string, allowed []string, each func(key string, k, v *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		what := "the file"
		if field != "" {
			what = field
		}
		w.fail(n, field, "%s must be a mapping, got %s", what, kindName(n))
		return
	}
	seen := map[string]*yaml.Node{}
	var merged [][2]*yaml.Node // pairs from merge keys, applied where not set explicitly
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = append(merged, w.mergePairs(v, field)...)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			w.fail(k, field, "key %s is not a string", kindName(k))
			continue
		}
		key := k.Value
		if !slices.Contains(allowed, key) {
			w.fail(k, join(field, key), "%s", unknownKey(key, allowed))
			continue
		}
		if first, dup := seen[key]; dup {
			w.fail(k, join(field, key), "duplicate key %q (first at line %d)", key, first.Line)
			continue
		}
		seen[key] = k
		each(key, k, v)
	}
	for _, kv := range merged {
		k, v := kv[0], kv[1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" || !slices.Contains(allowed, k.Value) {
			w.fail(k, join(field, k.Value), "merged key: %s", unknownKey(k.Value, allowed))
			continue
		}
		if _, set := seen[k.Value]; set {
			continue
		}
		seen[k.Value] = k
		each(k.Value, k, v)
	}
}

// mergePairs returns the key/value pairs a merge key brings: those of a
// mapping, or of each mapping in a list (earlier ones first).
func (w *walker) mergePairs(v *yaml.Node, field string) [][2]*yaml.Node {
	v = resolve(v)
	var maps []*yaml.Node
	switch v.Kind {
	case yaml.MappingNode:
		maps = []*yaml.Node{v}
	case yaml.SequenceNode:
		for _, m := range v.Content {
			maps = append(maps, resolve(m))
		}
	}
	var pairs [][2]*yaml.Node
	for _, m := range maps {
		if m.Kind != yaml.MappingNode {
			w.fail(m, field, "a merge key (<<) must name a mapping, got %s", kindName(m))
			continue
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			pairs = append(pairs, [2]*yaml.Node{resolve(m.Content[i]), m.Content[i+1]})
		}
	}
	return pairs
}

// unknownKey explains a key that is not allowed where it is written.
func unknownKey(key string, allowed []string) string {
	where := ""
	switch {
	case slices.Contains(rateLimitKeys, key) && !slices.Contains(allowed, key):
		where = ", it belongs inside rate_limit"
	case slices.Contains(descriptorKeys, key) && !slices.Contains(allowed, key):
		where = ", it belongs in a descriptor"
	case key == "domain":
		where = ", it belongs at the top of the file"
	}
	return fmt.Sprintf("unknown key %q here%s (want %s)", key, where, strings.Join(allowed, ", "))
}

// str reads a scalar as the text written, as envoyproxy/ratelimit does
// (yes, 10 and 2024-01-01 are strings); null is "". A number with a
// fraction or exponent is refused, as envoyproxy/ratelimit refuses it.
func (w *walker) str(n *yaml.Node, field string) string {
	n = resolve(n)
	switch {
	case isNull(n):
		return ""
	case n.Kind != yaml.ScalarNode:
		w.fail(n, field, "want a string, got %s", kindName(n))
		return ""
	case n.Tag == "!!float":
		w.fail(n, field, "%s reads as a floating-point number, which envoyproxy/ratelimit refuses: quote it", n.Value)
		return ""
	}
	return n.Value
}

// boolean reads true or false, with YAML 1.1's spellings (yes, no, on, off)
// that envoyproxy/ratelimit's parser accepts; null is false.
func (w *walker) boolean(n *yaml.Node, field string) bool {
	n = resolve(n)
	if isNull(n) {
		return false
	}
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!bool" || n.Style == 0) {
		switch n.Value {
		case "true", "True", "TRUE", "yes", "Yes", "YES", "y", "Y", "on", "On", "ON":
			return true
		case "false", "False", "FALSE", "no", "No", "NO", "n", "N", "off", "Off", "OFF":
			return false
		}
	}
	w.fail(n, field, "want true or false, got %s", kindName(n))
	return false
}

// integer reads an unquoted integer in [0, hi]; null is 0.
func (w *walker) integer(n *yaml.Node, field string, hi uint64) uint64 {
	n = resolve(n)
	if isNull(n) {
		return 0
	}
	if n.Kind == yaml.ScalarNode && n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 {
		text := strings.ReplaceAll(n.Value, "_", "")
		if v, err := strconv.ParseUint(strings.TrimPrefix(text, "+"), 0, 64); err == nil && v <= hi {
			return v
		}
		if v, err := strconv.ParseInt(text, 0, 64); err == nil && v < 0 {
			w.fail(n, field, "%s is negative: want an integer from 0 to %d", n.Value, hi)
			return 0
		}
	}
	w.fail(n, field, "want an integer from 0 to %d, got %s", hi, kindName(n))
	return 0
}

// descriptors reads a list of descriptors; null is an empty list.
func (w *walker) descriptors(n *yaml.Node, field string) []*rawDescriptor {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		w.fail(n, field, "want a list of descriptors, got %s", kindName(n))
		return nil
	}
	out := make([]*rawDescriptor, 0, len(n.Content))
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			w.fail(item, f, "a descriptor must be a mapping, got %s", kindName(item))
			continue
		}
		out = append(out, w.descriptor(item, f))
	}
	return out
}

func (w *walker) descriptor(n *yaml.Node, field string) *rawDescriptor {
	d := &rawDescriptor{at: w.at(n), keyAt: w.at(n), field: field}
	w.mapping(n, field, descriptorKeys, func(key string, k, v *yaml.Node) {
		f := join(field, key)
		switch key {
		case "key":
			d.key, d.keyAt = w.str(v, f), w.at(k)
		case "value":
			d.value = w.str(v, f)
		case "rate_limit":
			d.rateLimit = w.rateLimit(v, f)
		case "descriptors":
			d.descriptors = w.descriptors(v, f)
		case "shadow_mode":
			d.shadowMode = w.boolean(v, f)
		case "quota_mode":
			d.quotaMode = w.boolean(v, f)
		case "detailed_metric":
			d.detailedMetric = w.boolean(v, f)
		case "value_to_metric":
			d.valueToMetric = w.boolean(v, f)
		case "share_threshold":
			d.shareThreshold, d.shareAt = w.boolean(v, f), w.at(k)
		}
	})
	return d
}

// rateLimit reads a rate_limit block; null means none, as in
// envoyproxy/ratelimit.
func (w *walker) rateLimit(n *yaml.Node, field string) *rawRateLimit {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	r := &rawRateLimit{at: w.at(n), unitAt: w.at(n), field: field}
	w.mapping(n, field, rateLimitKeys, func(key string, k, v *yaml.Node) {
		f := join(field, key)
		switch key {
		case "unit":
			r.unit, r.unitAt = w.str(v, f), w.at(v)
		case "requests_per_unit":
			r.requestsPerUnit = uint32(w.integer(v, f, math.MaxUint32))
		case "unlimited":
			r.unlimited = w.boolean(v, f)
		case "name":
			r.name = w.str(v, f)
		case "replaces":
			r.replaces = w.replaces(v, f)
		case "algorithm":
			r.algorithm, r.algorithmAt, r.hasAlgorithm = w.str(v, f), w.at(v), true
		case "burst":
			r.burst, r.burstAt, r.hasBurst = int64(w.integer(v, f, math.MaxInt64)), w.at(v), true
		}
	})
	return r
}

func (w *walker) replaces(n *yaml.Node, field string) []rawReplace {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		w.fail(n, field, "want a list of {name: ...}, got %s", kindName(n))
		return nil
	}
	var out []rawReplace
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			w.fail(item, f, "a replaces entry must be a mapping {name: ...}, got %s", kindName(item))
			continue
		}
		r := rawReplace{at: w.at(item), field: join(f, "name")}
		w.mapping(item, f, replacesKeys, func(_ string, _, v *yaml.Node) { r.name = w.str(v, r.field) })
		out = append(out, r)
	}
	return out
}
