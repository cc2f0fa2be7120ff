package main

import "errors"

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

// exitCode is the status the process ends with for err: the one withExit
// gave it, else 1.
func exitCode(err error) int {
	if e, ok := errors.AsType[*exitError](err); ok {
		return e.code
	}
	return exitFailure
}
