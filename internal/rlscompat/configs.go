package rlscompat

// BadConfig is a configuration file one or both services refuse.
type BadConfig struct {
	Name string
	YAML string
	// TheyRefuse and WeRefuse say which service refuses the file.
	TheyRefuse, WeRefuse bool
	// Why explains a difference, when the two disagree.
	Why string
}

// BadConfigs returns the files of envoyproxy/ratelimit's own configuration
// tests that it refuses, and the ones where hybridlimit is stricter.
func BadConfigs() []BadConfig {
	both := func(name, yaml string) BadConfig {
		return BadConfig{Name: name, YAML: yaml, TheyRefuse: true, WeRefuse: true}
	}
	return []BadConfig{
		both("empty domain", "descriptors:\n"),
		both("empty key", "domain: d\ndescriptors:\n  - value: value1\n"),
		both("duplicate descriptor", "domain: d\ndescriptors:\n  - key: key1\n    value: value1\n  - key: key1\n    value: value1\n"),
		both("bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n"),
		both("bad yaml", "'''\n"),
		both("misspelled key", "domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: day\n      requests_per_unit: 5\n"),
		both("misspelled nested key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n"),
		both("non-string key", "0.25: d\ndescriptors:\n  - key: k\n"),
		both("list of non-maps", "domain: d\ndescriptors:\n  - a\n  - b\n"),
		both("unlimited with unit", "domain: d\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n"),
		both("replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name: self\n      unit: second\n      requests_per_unit: 5\n"),
		both("empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name:\n      unit: second\n      requests_per_unit: 5\n"),
		both("share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n"),
		both("float value", "domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n"),
		both("negative requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -5\n"),
		{Name: "misplaced key", YAML: "domain: d\ndescriptors:\n  - key: k\n    unit: second\n    requests_per_unit: 5\n", TheyRefuse: false, WeRefuse: true,
			Why: "a key of theirs in the wrong place (here the limit beside the descriptor instead of inside rate_limit) is silently ignored there, so the limit meant never applies; hybridlimit refuses the file"},
		{Name: "duplicate YAML key", YAML: "domain: d\ndescriptors:\n  - key: a\n    key: b\n", TheyRefuse: false, WeRefuse: true,
			Why: "their YAML parser keeps the last of two equal keys in one mapping; hybridlimit refuses the file, naming both lines"},
	}
}
