package config

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hybridlimit/hybridlimit/limit"
)

// File is one configuration file: its name (for errors, and for the order
// of loading) and its contents.
type File struct {
	Name string
	Data []byte
}

// Options configures Load. The zero value refuses a domain configured in two
// files, as envoyproxy/ratelimit does by default.
type Options struct {
	// MergeDomains lets several files configure one domain, their
	// descriptors merged (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG). A
	// descriptor configured twice is still an error.
	MergeDomains bool
}

// Parse is Load of one file.
func Parse(name string, data []byte) (*Config, error) {
	return Load([]File{{Name: name, Data: data}}, Options{})
}

// Load builds a Config from files, loaded in the order given. It reports
// every problem it finds, up to MaxErrors, as *Errors joined with
// errors.Join, and then returns no Config: a configuration is used whole or
// not at all.
func Load(files []File, opts Options) (*Config, error) {
	var p problems
	b := builder{cfg: &Config{domains: map[string]*node{}}, p: &p, opts: opts, domainFile: map[string]string{}}
	for _, f := range files {
		raw := parseFile(f.Name, f.Data, &p)
		if raw == nil {
			continue
		}
		b.cfg.files = append(b.cfg.files, f.Name)
		b.file(raw)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return b.cfg, nil
}

// DirOptions configures LoadDir and Watch. The zero value loads every
// file but dotfiles and refuses a domain configured twice.
type DirOptions struct {
	Options
	// Ext, if set, limits the files read to those whose name ends with
	// one of them (such as ".yaml", ".yml"). Empty means every file, as
	// envoyproxy/ratelimit reads its runtime directory.
	Ext []string
}

// LoadDir loads every regular file under dir, its subdirectories included,
// in lexical order of their paths, as envoyproxy/ratelimit loads its
// runtime directory (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config). Files and
// directories whose name starts with "." are skipped: Kubernetes mounts a
// ConfigMap's files twice, once under a "..data" directory. Symlinks to
// files are followed. A directory without a single file is an error.
func LoadDir(dir string, opts DirOptions) (*Config, error) {
	files, err := readDir(dir, opts.Ext)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, &Error{File: dir, Msg: "no configuration files in the directory"}
	}
	return Load(files, opts.Options)
}

// readDir reads the configuration files under dir, sorted by path.
func readDir(dir string, exts []string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if len(exts) > 0 && !hasExt(d.Name(), exts) {
			return nil
		}
		info, err := os.Stat(path) // follows a symlink
		if err != nil || !info.Mode().IsRegular() {
			return nil // a dangling link, a socket: not a configuration file
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		name, rerr := filepath.Rel(dir, path)
		if rerr != nil {
			name = path
		}
		files = append(files, File{Name: name, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", dir, err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, nil
}

func hasExt(name string, exts []string) bool {
	for _, e := range exts {
		if strings.HasSuffix(name, e) {
			return true
		}
	}
	return false
}

// builder turns raw files into a Config, checking what
// envoyproxy/ratelimit checks, and this project's fields.
type builder struct {
	cfg        *Config
	p          *problems
	opts       Options
	domainFile map[string]string // the file that configured each domain first
	firstAt    map[*node]map[string]pos
}

func (b *builder) file(f *rawFile) {
	if f.domain == "" {
		at := f.at
		if f.domainAt.line > 0 {
			at = f.domainAt
		}
		b.p.add(at, "domain", "config file cannot have empty domain")
		return
	}
	d, exists := b.cfg.domains[f.domain]
	if exists && !b.opts.MergeDomains {
		b.p.add(f.domainAt, "domain", "duplicate domain %q in config file (also in %s; set merging of domains to allow it)", f.domain, b.domainFile[f.domain])
		return
	}
	if !exists {
		d = &node{children: map[string]*node{}}
		b.cfg.domains[f.domain] = d
		b.domainFile[f.domain] = f.name
	}
	b.descriptors(d, f.domain+".", f.descriptors)
}

// descriptors adds descs under parent, whose full key is parentKey.
func (b *builder) descriptors(parent *node, parentKey string, descs []*rawDescriptor) {
	for _, rd := range descs {
		if rd.key == "" {
			b.p.add(rd.keyAt, join(rd.field, "key"), "descriptor has empty key")
			continue
		}
		name := rd.key
		if rd.value != "" {
			name += "_" + rd.value
		}
		fullKey := parentKey + name
		if b.firstAt == nil {
			b.firstAt = map[*node]map[string]pos{}
		}
		if _, dup := parent.children[name]; dup {
			first := b.firstAt[parent][name]
			b.p.add(rd.keyAt, rd.field, "duplicate descriptor composite key %q (first at %s line %d)", fullKey, first.file, first.line)
			continue
		}
		if b.firstAt[parent] == nil {
			b.firstAt[parent] = map[string]pos{}
		}
		b.firstAt[parent][name] = rd.keyAt
		wildcard := strings.HasSuffix(name, "*")
		if rd.shareThreshold && !wildcard {
			b.p.add(rd.shareAt, join(rd.field, "share_threshold"),
				"share_threshold can only be used with wildcard values (ending with '*'), but found key %q", name)
		}
		n := &node{children: map[string]*node{}, valueToMetric: rd.valueToMetric, shareThreshold: rd.shareThreshold}
		if rd.shareThreshold && wildcard {
			n.wildcardPattern = name
		}
		if rd.rateLimit != nil {
			n.rule = b.rule(rd, fullKey)
			if n.rule != nil {
				b.cfg.rules++
			}
		}
		if wildcard {
			parent.wildcards = append(parent.wildcards, name)
		}
		parent.children[name] = n
		b.descriptors(n, fullKey+".", rd.descriptors)
	}
}

// rule checks a rate_limit block and returns its Rule, nil if it is bad.
func (b *builder) rule(rd *rawDescriptor, fullKey string) *Rule {
	rl := rd.rateLimit
	before := len(b.p.list) + b.p.more
	r := &Rule{
		Key: fullKey, Name: rl.name, RequestsPerUnit: rl.requestsPerUnit, Unlimited: rl.unlimited,
		ShadowMode: rd.shadowMode, QuotaMode: rd.quotaMode, DetailedMetric: rd.detailedMetric,
		File: rl.at.file, Line: rl.at.line, EnvoyCounting: !rl.hasAlgorithm,
	}
	unit, validUnit := ParseUnit(rl.unit)
	switch {
	case rl.unlimited && validUnit:
		b.p.add(rl.unitAt, join(rl.field, "unit"), "should not specify rate limit unit when unlimited")
	case !rl.unlimited && !validUnit:
		b.p.add(rl.unitAt, join(rl.field, "unit"), "invalid rate limit unit %q (want %s)", rl.unit, unitList)
	}
	r.Unit = unit
	for _, rep := range rl.replaces {
		switch {
		case rep.name == "":
			b.p.add(rep.at, rep.field, "should not have an empty replaces entry")
		case rep.name == rl.name:
			b.p.add(rep.at, rep.field, "replaces should not contain name of same descriptor (%q)", rep.name)
		}
		r.Replaces = append(r.Replaces, rep.name)
	}
	// This project's fields.
	var algo limit.Algorithm
	if rl.hasAlgorithm {
		a, err := limit.ParseAlgorithm(rl.algorithm)
		if err != nil {
			b.p.add(rl.algorithmAt, join(rl.field, "algorithm"), "unknown algorithm %q (want token_bucket, leaky_bucket, fixed_window, sliding_window_counter or sliding_window_log; none means envoyproxy/ratelimit's fixed window)", rl.algorithm)
		}
		algo = a
		if rl.unlimited {
			b.p.add(rl.algorithmAt, join(rl.field, "algorithm"), "an unlimited rule has no algorithm")
		}
	}
	if rl.hasBurst {
		switch {
		case !rl.hasAlgorithm:
			b.p.add(rl.burstAt, join(rl.field, "burst"), "burst %d needs algorithm token_bucket or leaky_bucket beside it", rl.burst)
		case !algo.IsBucket():
			b.p.add(rl.burstAt, join(rl.field, "burst"), "burst %d set on %v, which has no burst (only token_bucket and leaky_bucket do)", rl.burst, algo)
		}
	}
	if len(b.p.list)+b.p.more > before {
		return nil
	}
	if !rl.unlimited && rl.requestsPerUnit > 0 {
		r.Limit = limit.Limit{Rate: int64(rl.requestsPerUnit), Period: unit.Period(), Algorithm: algo, Burst: rl.burst}
		if !rl.hasAlgorithm {
			r.Limit.Algorithm = limit.FixedWindow
		}
		if err := r.Limit.Validate(); err != nil {
			at, field := rl.at, rl.field
			if rl.hasBurst {
				at, field = rl.burstAt, join(rl.field, "burst")
			}
			b.p.add(at, field, "%d per %s cannot be enforced: %v", rl.requestsPerUnit, unit, err)
			return nil
		}
	}
	return r
}
