package config

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrUnknownDomain is wrapped by the error of Match for a domain no file
// defines. envoyproxy/ratelimit answers such a request OK, with no limit
// applied and a "domain not found" count; the server should do the same.
var ErrUnknownDomain = errors.New("config: unknown domain")

// Error is one problem in a config file. Load and Parse return every
// problem they find, joined with errors.Join; errors.As finds the first.
type Error struct {
	File string
	// Line is 1-based; 0 when the problem is with the file as a whole.
	Line int
	// Field is the path to the offending field, such as
	// "descriptors[0].rate_limit.unit", or "" for the file as a whole.
	Field string
	// Err says what is wrong. It wraps sluice.ErrUnknownAlgo,
	// sluice.ErrInvalidLimit or sluice.ErrLimitTooLarge where one applies.
	Err error
}

// Error formats the problem as "FILE:LINE: FIELD: what is wrong".
func (e *Error) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

// Caps on the problems reported, so that a garbage file cannot produce
// megabytes of messages: a file is read until maxErrors problems are
// found, and a load lists at most maxListed.
const (
	maxErrors = 20
	maxListed = 50
)

// joinErrors joins errs, listing at most maxListed of them.
func joinErrors(errs []error) error {
	if len(errs) > maxListed {
		more := len(errs) - maxListed
		errs = append(errs[:maxListed:maxListed], fmt.Errorf("... and %d more problems", more))
	}
	return errors.Join(errs...)
}
