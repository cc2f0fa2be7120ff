package main

import (
	"errors"
	"io"
)

// Exit statuses, for scripts and CI steps.
const (
	exitFailure = 1 // the command ran and failed (lint: problems found)
	exitUsage   = 2 // the command could not run as asked: bad arguments, unreadable files
)

// exitError is an error with the exit status the process ends with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExit gives err the exit status code.
func withExit(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// usageError is a command used wrongly: an unknown command or flag, a value
// a flag cannot take, an argument too many or missing. The process prints
// it on one line, then usage (the command's, or the command list), both on
// standard error, and exits 2 (exitUsage). Make one with misuse.
type usageError struct {
	err   error
	usage func(io.Writer)
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// exitCode is the status the process ends with for err: exitUsage for a
// usage error, the one withExit gave it, else 1.
func exitCode(err error) int {
	if _, ok := errors.AsType[*usageError](err); ok {
		return exitUsage
	}
	if e, ok := errors.AsType[*exitError](err); ok {
		return e.code
	}
	return exitFailure
}
