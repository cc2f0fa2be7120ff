package rules

import (
	"fmt"
	"io"
	"os"
	"strconv"
)

// DefaultMaxFileSize is the largest rules file Load, ParseFile and Watch
// read when no other bound is given: 1 MiB, some 20,000 rules. Parsing costs
// time and memory in proportion to the file (a valid 10 MiB file takes
// seconds and hundreds of MB to check), so a larger file is refused before
// it is parsed; a deployment that means to have one sets a larger bound
// (LoadOptions.MaxFileSize, WatchOptions.MaxFileSize, or the gateway's and
// the linter's -rules-max-size).
const DefaultMaxFileSize = 1 << 20

// FileSizeError is the error for a rules file over its size bound. It is
// returned before the file is parsed, so nothing of it was loaded.
type FileSizeError struct {
	// File is the file's path.
	File string
	// Size is the file's size in bytes, or -1 when it has none to tell
	// (a pipe, a device), in which case more than Max bytes were read.
	Size int64
	// Max is the bound it is over.
	Max int64
}

// Error names the file, its size and the bound, and how to raise the bound.
func (e *FileSizeError) Error() string {
	size := "larger than that"
	if e.Size >= 0 {
		size = fmt.Sprintf("%s (%d bytes)", byteCount(e.Size), e.Size)
	}
	return fmt.Sprintf("rules: %s: the file is over the size bound of %s (%d bytes) on a rules file: it is %s; "+
		"raise the bound (MaxFileSize, or -rules-max-size) if it is meant to be this large",
		e.File, byteCount(e.Max), e.Max, size)
}

// byteCount writes n in the largest binary unit it is at least one of,
// with one decimal where it is not a whole number of them.
func byteCount(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size {
			if n%u.size == 0 {
				return strconv.FormatInt(n/u.size, 10) + " " + u.suffix
			}
			return strconv.FormatFloat(float64(n)/float64(u.size), 'f', 1, 64) + " " + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}

// LoadOptions says how Load reads its file. The zero value reads no
// environment and bounds the file at DefaultMaxFileSize.
type LoadOptions struct {
	// Env, if not nil, is overlaid on the file (ApplyEnv). Typically
	// os.LookupEnv.
	Env func(string) (string, bool)
	// MaxFileSize is the largest file read, in bytes: a larger one is
	// refused with a *FileSizeError before it is parsed. Zero means
	// DefaultMaxFileSize; negative means no bound.
	MaxFileSize int64
}

// Load builds Rules from the configuration file at path overlaid with the
// environment read through lookup, in the precedence ApplyEnv documents:
// environment, then file, then the built-in defaults. An empty path reads
// no file (the environment alone, as FromEnv); a nil lookup reads no
// environment. A file over DefaultMaxFileSize is refused (LoadWith sets
// another bound).
func Load(path string, lookup func(string) (string, bool)) (*Rules, error) {
	return LoadWith(path, LoadOptions{Env: lookup})
}

// LoadWith is Load with options: the environment to overlay and the bound
// on the file's size.
func LoadWith(path string, opts LoadOptions) (*Rules, error) {
	if path == "" {
		cfg := &Config{}
		if opts.Env != nil {
			if err := cfg.ApplyEnv(opts.Env); err != nil {
				return nil, err
			}
		}
		return Compile(cfg)
	}
	data, err := readFile(path, opts.MaxFileSize)
	if err != nil {
		return nil, err
	}
	return compileData(data, path, opts.Env)
}

// readFile reads the file at path, refusing one over max bytes (zero:
// DefaultMaxFileSize; negative: no bound) without reading more than max+1
// bytes of it, whatever it is: a regular file is refused on its size alone,
// a pipe or a device (which has none) once it has given more than max.
func readFile(path string, max int64) ([]byte, error) {
	if max == 0 {
		max = DefaultMaxFileSize
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rules: read config: %w", err)
	}
	defer f.Close()
	r := io.Reader(f)
	if max > 0 {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > max {
			return nil, &FileSizeError{File: path, Size: fi.Size(), Max: max}
		}
		r = io.LimitReader(f, max+1)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("rules: read config: %w", err)
	}
	if max > 0 && int64(len(data)) > max {
		// A file that grew since Stat, or one with no size to tell.
		size := int64(-1)
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		return nil, &FileSizeError{File: path, Size: size, Max: max}
	}
	return data, nil
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
