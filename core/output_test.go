package core

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/callsheet/callsheet/events"
)

func TestCapOutput(t *testing.T) {
	img := events.Part{Type: "image", MIME: "image/png", Data: []byte{1, 2, 3}}
	tests := []struct {
		name          string
		text          string
		wantTruncated bool
	}{
		{"small passes untouched", "hello\nworld\n", false},
		{"exactly at the caps", strings.Repeat("x\n", 2000), false},
		{"too many short lines", strings.Repeat("x\n", 5000), true},
		{"too many bytes on few lines", strings.Repeat("y", 60000), true},
		{"multi-byte runes at the cut", strings.Repeat("é", 40000), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := []events.Part{{Type: "text", Text: tt.text}, img}
			out, truncated, full := CapOutput(parts, DefaultMaxBytes, DefaultMaxLines, "tenant/s/obj")
			if truncated != tt.wantTruncated {
				t.Fatalf("truncated=%v, want %v", truncated, tt.wantTruncated)
			}
			if !truncated {
				if len(out) != 2 || out[0].Text != tt.text || full != nil {
					t.Fatalf("an output within the caps was changed")
				}
				return
			}
			text := out[0].Text
			if len(text) > DefaultMaxBytes || strings.Count(text, "\n") > DefaultMaxLines {
				t.Fatalf("cut text is %d bytes, %d lines; want ≤ %d bytes and ≤ %d lines", len(text), strings.Count(text, "\n"), DefaultMaxBytes, DefaultMaxLines)
			}
			if !utf8.ValidString(text) {
				t.Fatal("the cut split a rune")
			}
			if !strings.Contains(text, "tenant/s/obj") || !strings.Contains(text, "truncated") {
				t.Fatalf("the cut text does not say it was cut and where the rest is: ...%q", text[max(len(text)-200, 0):])
			}
			if string(full) != tt.text {
				t.Fatal("the full output is not the whole text")
			}
			if out[len(out)-1].Type != "image" {
				t.Fatal("an image part was dropped")
			}
		})
	}
}

func FuzzCapOutput(f *testing.F) {
	f.Add("a\nb\n", 10, 1)
	f.Add(strings.Repeat("é\n", 50), 40, 3)
	f.Fuzz(func(t *testing.T, text string, maxBytes, maxLines int) {
		if maxBytes < 200 || maxBytes > 1<<20 || maxLines < 2 || maxLines > 10000 {
			return
		}
		out, truncated, _ := CapOutput([]events.Part{{Type: "text", Text: text}}, maxBytes, maxLines, "o")
		if truncated && (len(out[0].Text) > maxBytes || strings.Count(out[0].Text, "\n") > maxLines) {
			t.Fatalf("cut to %d bytes, %d lines; caps %d, %d", len(out[0].Text), strings.Count(out[0].Text, "\n"), maxBytes, maxLines)
		}
	})
}

// TestCutWithTotals: a result that shows the start of a larger output is
// cut as if the whole had been given, its marker carries the whole's
// totals, and the note says where the whole is, or that it was not kept.
func TestCutWithTotals(t *testing.T) {
	head := strings.Repeat("line of text\n", 20_000) // 260 kB: the start of 3 MB
	total := Totals{Bytes: 3_000_000, Lines: 230_769}
	for _, note := range []string{KeptAs("t/s/ev"), NotKept("the tenant's kept full outputs hold 9 bytes, the limit limits.output_bytes_per_tenant is 8")} {
		out := Cut([]events.Part{{Type: "text", Text: head}}, DefaultMaxBytes, DefaultMaxLines, total, note)
		text := out[0].Text
		if len(out) != 1 || len(text) > DefaultMaxBytes || strings.Count(text, "\n") > DefaultMaxLines {
			t.Fatalf("cut to %d parts, %d bytes, %d lines", len(out), len(text), strings.Count(text, "\n"))
		}
		if !strings.Contains(text, "of 3000000 bytes and") || !strings.Contains(text, "of 230769 lines; "+note+"]") || !strings.HasPrefix(text, "line of text\n") {
			t.Fatalf("marker does not carry the totals and the note %q: ...%q", note, text[len(text)-300:])
		}
	}
	// CapOutput is Cut with the totals of what it was given.
	parts := []events.Part{{Type: "text", Text: strings.Repeat("y", 60000)}}
	capped, truncated, full := CapOutput(parts, DefaultMaxBytes, DefaultMaxLines, "o")
	if !truncated || len(full) != 60000 || capped[0].Text != Cut(parts, DefaultMaxBytes, DefaultMaxLines, Measure(string(full)), KeptAs("o"))[0].Text {
		t.Fatal("CapOutput and Cut disagree")
	}
	if m := Measure("a\nb"); m.Bytes != 3 || m.Lines != 2 || m.Over(3, 2) || !m.Over(2, 2) {
		t.Fatalf("Measure(a\\nb) = %+v", m)
	}
}
