package config

import (
	"errors"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every error that says a configuration is wrong, so
// callers can tell a bad file (errors.Is(err, ErrInvalid)) from one that
// could not be read.
var ErrInvalid = errors.New("config: invalid configuration")

// Error is one problem with a configuration: where it is and what is wrong.
// It wraps ErrInvalid. Errors returned by this package that hold several
// problems join several *Error values (errors.Join); errors.As finds the
// first.
type Error struct {
	// File is the file the configuration came from; set by Load only.
	File string
	// Line and Column locate the problem in the source, counting from 1;
	// zero when unknown (Validate on a Config built in Go, or a default that
	// was never written).
	Line, Column int
	// Path is the JSON path of the offending value, such as
	// "concurrency.tool_calls" or "command_tools[2].name"; empty when the
	// problem is with the document as a whole.
	Path string
	// Reason says what is wrong, with the value, and what to do.
	Reason string
}

// Error renders "config: [FILE:LINE:COL: ][PATH: ]REASON"; without a file a
// known position reads "line L, column C: ".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	switch {
	case e.File != "" && e.Line > 0:
		b.WriteString(e.File + ":" + strconv.Itoa(e.Line) + ":" + strconv.Itoa(e.Column) + ": ")
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		b.WriteString("line " + strconv.Itoa(e.Line) + ", column " + strconv.Itoa(e.Column) + ": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// join returns nil, the single problem itself, or all of them joined.
func join(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}
