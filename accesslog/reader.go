package accesslog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
)

// MaxLine is the longest line a Reader reads; a longer one is malformed.
const MaxLine = 1 << 20

// Malformed is a line a Reader could not read.
type Malformed struct {
	File   string // the file's name
	Line   int    // the line's number, from 1
	Reason string // what is wrong with it
	Text   string // the line, cut to 200 bytes
}

func (m Malformed) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", m.File, m.Line, m.Reason, m.Text)
}

// Reader reads the entries of one access log. It is not safe for
// concurrent use, except BytesRead.
type Reader struct {
	name     string
	opts     Options
	format   Format // resolved at the first line
	fields   jsonFields
	closer   io.Closer
	counted  *countingReader
	br       *bufio.Reader
	long     []byte // a line longer than the buffer, gathered
	line     int
	bad      int
	examples []Malformed
	err      error
}

// Open opens the access log in the file called name, plain or
// gzip-compressed (told by its first bytes, whatever its name). An error
// means the file cannot be read at all; its lines' faults are Malformed.
func Open(name string, opts Options) (*Reader, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("accesslog: %w", err)
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		_ = f.Close()
		return nil, fmt.Errorf("accesslog: %s is a directory", name)
	}
	r, err := NewReader(f, name, opts)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// NewReader reads the access log in src, plain or gzip-compressed, under
// the name name (for messages).
func NewReader(src io.Reader, name string, opts Options) (*Reader, error) {
	if opts.Format < Auto || opts.Format > JSON {
		return nil, fmt.Errorf("accesslog: %v is not a Format", opts.Format)
	}
	if opts.Fields == (Fields{}) {
		opts.Fields = EnvoyFields()
	}
	if opts.Examples == 0 {
		opts.Examples = 5
	}
	counted := &countingReader{r: src}
	br := bufio.NewReaderSize(counted, 64<<10)
	magic, err := br.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("accesslog: %s: %w", name, err)
	}
	r := &Reader{name: name, opts: opts, format: opts.Format, fields: newJSONFields(opts.Fields), counted: counted, br: br}
	if bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("accesslog: %s: %w", name, err)
		}
		r.br = bufio.NewReaderSize(zr, 64<<10)
	}
	return r, nil
}

// Next reads the next entry into e and reports whether it did: false at
// the end of the log, or when it could not be read (Err says why). Lines
// that are blank are skipped; lines that are malformed are counted and
// skipped.
func (r *Reader) Next(e *Entry) bool {
	for r.err == nil {
		line, err := r.readLine()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.err = fmt.Errorf("accesslog: %s, after line %d: %w", r.name, r.line, err)
			}
			return false
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(line) > MaxLine {
			r.malformed(line[:200], fmt.Sprintf("longer than %d bytes", MaxLine))
			continue
		}
		if r.format == Auto {
			r.format = Combined
			if bytes.HasPrefix(bytes.TrimSpace(line), []byte("{")) {
				r.format = JSON
			}
		}
		if r.format == JSON {
			err = parseJSON(line, &r.fields, e)
		} else {
			err = parseCombined(line, e)
		}
		if err != nil {
			r.malformed(line, err.Error())
			continue
		}
		return true
	}
	return false
}

// readLine returns the next line with its newline, however long; a line
// longer than MaxLine is returned with only its first MaxLine+1 bytes.
func (r *Reader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		if err == nil || len(line) > 0 && errors.Is(err, io.EOF) {
			r.line++
			return line, nil
		}
		return nil, err
	}
	r.long = append(r.long[:0], line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		line, err = r.br.ReadSlice('\n')
		if len(r.long) <= MaxLine {
			r.long = append(r.long, line[:min(len(line), MaxLine+1-len(r.long))]...)
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	r.line++
	return r.long, nil
}

// malformed counts a malformed line and keeps the first few.
func (r *Reader) malformed(line []byte, reason string) {
	r.bad++
	if len(r.examples) < r.opts.Examples {
		text := string(line[:min(len(line), 200)])
		r.examples = append(r.examples, Malformed{File: r.name, Line: r.line, Reason: reason, Text: strings.ToValidUTF8(text, "?")})
	}
}

// Err returns why the log could not be read to its end, or nil.
func (r *Reader) Err() error { return r.err }

// Lines returns how many lines were read so far.
func (r *Reader) Lines() int { return r.line }

// Malformed returns how many lines could not be read so far, and the first
// few (Options.Examples) of them.
func (r *Reader) Malformed() (int, []Malformed) { return r.bad, r.examples }

// BytesRead returns how many bytes of the file (compressed, for a gzip
// file) were read so far. It is safe to call while another goroutine
// reads, for a progress bar.
func (r *Reader) BytesRead() int64 { return r.counted.n.Load() }

// Close closes the file Open opened.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
