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

// CapOutput cuts a result's text and JSON content to maxBytes and maxLines
// (the marker it appends included). When it cuts, it returns one text part
// holding the head and a marker naming where the full output is (object),
// truncated true, and the full output to store. Image parts pass through.
func CapOutput(parts []events.Part, maxBytes, maxLines int, object string) (out []events.Part, truncated bool, full []byte) {
	var b strings.Builder
	var images []events.Part
	for _, p := range parts {
		switch p.Type {
		case "text":
			b.WriteString(p.Text)
		case "json":
			b.Write(p.JSON)
		default:
			images = append(images, p)
			continue
		}
	}
	all := b.String()
	lines := strings.Count(all, "\n")
	if len(all) > 0 && !strings.HasSuffix(all, "\n") {
		lines++
	}
	if len(all) <= maxBytes && lines <= maxLines {
		return parts, false, nil
	}
	// Reserve room for the marker; the numbers in it are at most as long as
	// the totals, so format it with the totals to size the reservation.
	marker := func(shownBytes, shownLines int) string {
		return fmt.Sprintf("\n[output truncated: showing %d of %d bytes and %d of %d lines; the full output is kept as %s]\n",
			shownBytes, len(all), shownLines, lines, object)
	}
	budget := max(maxBytes-len(marker(len(all), lines)), 0)
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
	out = append([]events.Part{{Type: "text", Text: text}}, images...)
	return out, true, []byte(all)
}
