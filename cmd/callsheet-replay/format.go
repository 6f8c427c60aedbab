package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/replay"
)

// Formats lists the output formats --format accepts.
var Formats = []string{FormatMarkdown, FormatJSON, FormatHTML}

// checkFormat says what to use instead of an unknown format.
func checkFormat(f string) error {
	if slices.Contains(Formats, f) {
		return nil
	}
	return fmt.Errorf("callsheet-replay: --format %q: use %s", f, strings.Join(Formats, ", "))
}

// render prints a session's events in format, whichever source gave them:
// json is the transcript exactly as GET /v1/sessions/{s}/transcript serves
// it; markdown and html are the audit fold (docs/audit.md), html being the
// page GET /v1/sessions/{s}/timeline serves.
func render(format, tenant, session string, evs []events.Event) ([]byte, error) {
	switch format {
	case FormatJSON:
		tr, err := projections.Fold(session, evs)
		if err != nil {
			return nil, fmt.Errorf("rebuilding the transcript: %w (run with --verify for the log's problems)", err)
		}
		return projections.Marshal(tr)
	case FormatMarkdown:
		return replay.Markdown(projections.FoldAudit(tenant, session, evs)), nil
	case FormatHTML:
		return replay.Timeline(projections.FoldAudit(tenant, session, evs, projections.ClipAt(replay.TimelineClip))), nil
	}
	return nil, checkFormat(format)
}
