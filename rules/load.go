package rules

import (
	"fmt"
	"os"
)

// Load builds Rules from the configuration file at path overlaid with the
// environment read through lookup, in the precedence ApplyEnv documents:
// environment, then file, then the built-in defaults. An empty path reads
// no file (the environment alone, as FromEnv); a nil lookup reads no
// environment.
func Load(path string, lookup func(string) (string, bool)) (*Rules, error) {
	if path == "" {
		cfg := &Config{}
		if lookup != nil {
			if err := cfg.ApplyEnv(lookup); err != nil {
				return nil, err
			}
		}
		return Compile(cfg)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules: read config: %w", err)
	}
	return compileData(data, path, lookup)
}

// compileData parses a file's contents, overlays the environment and
// compiles the result.
func compileData(data []byte, file string, lookup func(string) (string, bool)) (*Rules, error) {
	cfg, err := parse(data, file)
	if err != nil {
		return nil, err
	}
	if lookup != nil {
		if err := cfg.ApplyEnv(lookup); err != nil {
			return nil, err
		}
	}
	return Compile(cfg)
}
