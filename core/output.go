package core

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/callsheet/callsheet/events"
)

// Output caps (docs/spec.md §2.5).
const (
	DefaultMaxBytes = 51200
	DefaultMaxLines = 2000
)

// Totals measure a whole output: its bytes and its lines (a last line
// without a newline counts).
type Totals struct {
	Bytes int64
	Lines int
}

// Over reports whether an output of these totals exceeds the caps.
func (t Totals) Over(maxBytes, maxLines int) bool {
	return t.Bytes > int64(maxBytes) || t.Lines > maxLines
}

// CapOutput cuts a result's text and JSON content to maxBytes and maxLines
// (the marker it appends included). When it cuts, it returns one text part
// holding the head and a marker naming where the full output is (object),
// truncated true, and the full output to store. Image parts pass through.
func CapOutput(parts []events.Part, maxBytes, maxLines int, object string) (out []events.Part, truncated bool, full []byte) {
	all := Text(parts)
	total := Measure(all)
	if !total.Over(maxBytes, maxLines) {
		return parts, false, nil
	}
	return Cut(parts, maxBytes, maxLines, total, KeptAs(object)), true, []byte(all)
}

// KeptAs is Cut's note for a full output kept under object.
func KeptAs(object string) string { return "the full output is kept as " + object }

// NotKept is Cut's note for a full output that was not kept, and why.
func NotKept(why string) string { return "the full output was not kept: " + why }

// Measure returns the totals of text.
func Measure(text string) Totals {
	lines := strings.Count(text, "\n")
	if len(text) > 0 && !strings.HasSuffix(text, "\n") {
		lines++
	}
	return Totals{Bytes: int64(len(text)), Lines: lines}
}

// Text is a result's text and JSON content, in order, images aside: what
// the caps measure.
func Text(parts []events.Part) string {
	var b strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "text":
			b.WriteString(p.Text)
		case "json":
			b.Write(p.JSON)
		}
	}
	return b.String()
}

// Cut returns parts' text and JSON content, which is the start of an output
// of the given totals, cut to maxBytes and maxLines with a marker (included
// in the caps) saying how much of the totals is shown, then note (where the
// full output is, KeptAs, or that it was not kept, NotKept). The result is
// one text part followed by the image parts. A cut never splits a rune.
func Cut(parts []events.Part, maxBytes, maxLines int, total Totals, note string) []events.Part {
	all := Text(parts)
	var images []events.Part
	for _, p := range parts {
		if p.Type != "text" && p.Type != "json" {
			images = append(images, p)
		}
	}
	// Reserve room for the marker; the numbers in it are at most as long as
	// the totals, so format it with the totals to size the reservation.
	marker := func(shownBytes, shownLines int) string {
		return fmt.Sprintf("\n[output truncated: showing %d of %d bytes and %d of %d lines; %s]\n",
			shownBytes, total.Bytes, shownLines, total.Lines, note)
	}
	budget := max(maxBytes-len(marker(len(all), max(total.Lines, Measure(all).Lines))), 0)
	head := all[:min(budget, len(all))]
	for len(head) > 0 && !utf8.ValidString(head[max(len(head)-utf8.UTFMax, 0):]) {
		head = head[:len(head)-1] // never cut inside a rune
	}
	// Keep at most maxLines-1 lines, leaving one for the marker.
	keep := max(maxLines-1, 0)
	if n := strings.Count(head, "\n"); n >= keep {
		idx, seen := 0, 0
		for i := 0; i < len(head) && seen < keep; i++ {
			if head[i] == '\n' {
				seen++
				idx = i + 1
			}
		}
		head = head[:idx]
	}
	shownLines := strings.Count(head, "\n")
	if len(head) > 0 && !strings.HasSuffix(head, "\n") {
		shownLines++
	}
	text := strings.TrimSuffix(head, "\n") + marker(len(head), shownLines)
	return append([]events.Part{{Type: "text", Text: text}}, images...)
}
