// Package logging builds a node's *slog.Logger from its --log-level and
// --log-format flags and names the attributes every log line uses
// (docs/operations.md, "Logs"). A logger is always given to a component
// (an option of node.New, api.New, the cluster's pieces), never taken from
// a global; Or makes a nil one discard.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Levels and formats --log-level and --log-format accept.
const (
	DefaultLevel  = "info"
	DefaultFormat = "text"
	FormatText    = "text"
	FormatJSON    = "json"
)

// The attribute keys of the node's log lines, one spelling each.
const (
	KeyComponent = "component" // which part of the node logs: fleet, lease, api, mcp, harness, ...
	KeyTenant    = "tenant"
	KeySession   = "session"
	KeyTurn      = "turn"
	KeyCall      = "call" // the model's call id
	KeyTool      = "tool"
	KeyAttempt   = "attempt"
	KeyNode      = "node"
	KeyErr       = "err"
)

// Levels lists the --log-level values, most verbose first.
func Levels() []string { return []string{"debug", "info", "warn", "error"} }

// ParseLevel reads a --log-level value: debug, info, warn or error (any
// case). The error names the value and the choices.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: use one of %s", s, strings.Join(Levels(), ", "))
}

// New returns a logger writing to w at level (ParseLevel) in format: text
// (logfmt-like key=value pairs, slog's TextHandler) or json (one JSON
// object per line, slog's JSONHandler). Every line carries time, level and
// msg. It fails for a level or format it does not know, naming it.
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	lv, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case FormatText, "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// Discard returns a logger that writes nothing.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Or returns l, or a logger that writes nothing when l is nil.
func Or(l *slog.Logger) *slog.Logger {
	if l == nil {
		return Discard()
	}
	return l
}

// Err is the attribute of an error, under KeyErr.
func Err(err error) slog.Attr { return slog.Any(KeyErr, err) }
