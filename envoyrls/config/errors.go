package config

import (
	"errors"
	"fmt"
	"strings"
)

// Error is one problem with a configuration: the file, the line and column
// (1-based, zero when unknown), the field's path such as
// "descriptors[0].rate_limit.unit", and what is wrong. Its message reads
//
//	config: ratelimit.yaml: line 7, column 13: descriptors[0].rate_limit.unit: invalid rate limit unit "foo" (want second, minute, hour, day, week, month or year)
//
// Parse and Load return every Error they find, up to MaxErrors, joined with
// errors.Join; errors.As finds the first.
type Error struct {
	File         string
	Line, Column int
	Field        string
	Msg          string
}

// MaxErrors caps the Errors one load reports; the rest are counted in a
// last one.
const MaxErrors = 20

// Error formats e as "config: <file>: line L, column C: <field>: <msg>".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	switch {
	case e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// pos is where something is written in a file.
type pos struct {
	file         string
	line, column int
}

// problems collects Errors in the order they are found.
type problems struct {
	list []*Error
	more int
}

func (p *problems) add(at pos, field, format string, args ...any) {
	if len(p.list) >= MaxErrors {
		p.more++
		return
	}
	p.list = append(p.list, &Error{File: at.file, Line: at.line, Column: at.column, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// err joins the problems, or returns nil if there are none.
func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	errs := make([]error, 0, len(p.list)+1)
	for _, e := range p.list {
		errs = append(errs, e)
	}
	if p.more > 0 {
		errs = append(errs, fmt.Errorf("config: %d more problems not shown", p.more))
	}
	return errors.Join(errs...)
}
