package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// Markdown renders a transcript for people: each turn with its status and
// retry notices, then each call in call order with its outcome, block
// category, attempts, content and truncation. It is pure: the same
// transcript gives the same bytes.
func Markdown(tr projections.Transcript) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Session %s\n", tr.Session)
	if len(tr.Turns) == 0 {
		b.WriteString("\nNo turns.\n")
	}
	for _, t := range tr.Turns {
		fmt.Fprintf(&b, "\n## Turn %s (%s)\n", t.Turn, t.Status)
		if len(t.Notices) > 0 {
			b.WriteString("\nRetry notices:\n\n")
			for _, n := range t.Notices {
				fmt.Fprintf(&b, "- call %s (%s, turn %s, attempt %d): %s\n", n.Call, n.Tool, n.Turn, n.Attempt, oneLine(n.Message))
			}
		}
		if len(t.Results) == 0 {
			b.WriteString("\nNo results committed yet.\n")
		}
		for i, r := range t.Results {
			writeResult(&b, i+1, r)
		}
	}
	return b.Bytes()
}

func writeResult(b *bytes.Buffer, n int, r events.Result) {
	outcome := string(r.Outcome)
	if r.Block != "" {
		outcome += " (" + string(r.Block) + ")"
	}
	fmt.Fprintf(b, "\n### %d. %s `%s`: %s\n\n", n, r.Name, r.ID, outcome)
	fmt.Fprintf(b, "Attempts: %d\n", r.Attempts)
	if r.Truncated {
		if f := r.FullOutput; f != nil {
			fmt.Fprintf(b, "Truncated: the full output (%d bytes, %d lines) is object `%s` in store `%s`\n", f.Bytes, f.Lines, f.Object, f.Store)
		} else {
			b.WriteString("Truncated: the full output was not kept\n")
		}
	}
	if len(r.Touched) > 0 {
		fmt.Fprintf(b, "Touched: %s\n", strings.Join(r.Touched, ", "))
	}
	for _, p := range r.Content {
		b.WriteString("\n")
		switch p.Type {
		case "text":
			fence(b, "", p.Text)
		case "json":
			var pretty bytes.Buffer
			if json.Indent(&pretty, p.JSON, "", "  ") != nil {
				pretty.Reset()
				pretty.Write(p.JSON)
			}
			fence(b, "json", pretty.String())
		case "image":
			fmt.Fprintf(b, "[image %s, %d bytes]\n", p.MIME, len(p.Data))
		default:
			fmt.Fprintf(b, "[%s content]\n", p.Type)
		}
	}
}

// fence writes text as a fenced code block whose fence is longer than any
// run of backticks in it, so no content can end the block early.
func fence(b *bytes.Buffer, lang, text string) {
	longest, run := 0, 0
	for _, c := range text {
		if c == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	f := strings.Repeat("`", max(3, longest+1))
	b.WriteString(f + lang + "\n" + text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteString("\n")
	}
	b.WriteString(f + "\n")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
