package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// Markdown renders a session's audit model for people: the session's facts
// (where it ran, its events, outcomes, pending approvals, rewinds, close),
// then each turn with its times and retry notices, then each call in call
// order with its outcome, block category, attempts and their times,
// approval and its decider, retries, checkpoints, truncation, arguments and
// content. The facts are the timeline page's, in the same words
// (docs/audit.md). It is pure: the same model gives the same bytes.
func Markdown(a projections.Audit) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Session %s\n", a.Session)
	writeFacts(&b, sessionFacts(a))
	if len(a.Turns) == 0 {
		b.WriteString("\nNo turns.\n")
	}
	for i := range a.Turns {
		t := &a.Turns[i]
		fmt.Fprintf(&b, "\n## Turn %s (%s)\n\n%s\n", mdText(t.Turn), t.Status, mdText(turnFacts(t)))
		if len(t.Notices) > 0 {
			b.WriteString("\nRetry notices:\n\n")
			for _, n := range t.Notices {
				fmt.Fprintf(&b, "- %s\n", mdText(noticeText(t, n)))
			}
		}
		if len(t.Marks) > 0 {
			b.WriteString("\nOther events:\n\n")
			for _, m := range t.Marks {
				fmt.Fprintf(&b, "- %s\n", mdText(markText(t.Received.Time, m)))
			}
		}
		committed := 0
		for _, c := range t.Calls {
			if c.Result != nil {
				committed++
			}
		}
		if committed == 0 {
			b.WriteString("\nNo results committed yet.\n")
		}
		for j := range t.Calls {
			writeCall(&b, t, &t.Calls[j])
		}
	}
	return b.Bytes()
}

func writeFacts(b *bytes.Buffer, fs []fact) {
	if len(fs) == 0 {
		return
	}
	b.WriteString("\n")
	for _, f := range fs {
		fmt.Fprintf(b, "- %s: %s\n", f.Label, mdText(f.Text))
	}
}

func writeCall(b *bytes.Buffer, t *projections.AuditTurn, c *projections.AuditCall) {
	r := c.Result
	state := c.State()
	if r != nil && r.Block != "" {
		state += " (" + string(r.Block) + ")"
	}
	fmt.Fprintf(b, "\n### %d. %s %s: %s\n\n", c.Index+1, mdText(c.Name), codeSpan(c.ID), state)
	if r != nil {
		fmt.Fprintf(b, "- Attempts: %d\n", r.Attempts)
		if r.Truncated {
			if f := r.FullOutput; f != nil {
				fmt.Fprintf(b, "- Truncated: the full output (%d bytes, %d lines) is object `%s` in store `%s`\n", f.Bytes, f.Lines, f.Object, f.Store)
			} else {
				b.WriteString("- Truncated: the full output was not kept\n")
			}
		}
		if len(r.Touched) > 0 {
			fmt.Fprintf(b, "- Touched: %s\n", mdText(strings.Join(r.Touched, ", ")))
		}
	} else {
		fmt.Fprintf(b, "- Attempts: %d so far\n", len(c.Attempts))
	}
	for _, f := range callFacts(t, c) {
		fmt.Fprintf(b, "- %s: %s\n", f.Label, mdText(f.Text))
	}
	b.WriteString("\nArguments:\n\n")
	fence(b, "json", prettyJSON(c.Arguments))
	if r == nil {
		return
	}
	if len(r.Content) > 0 {
		b.WriteString("\nResult:\n")
	}
	writeParts(b, r.Content)
	// A background call's committed result is its job; what the job
	// returned is the attempt's.
	for _, a := range c.Attempts {
		if a.Outcome == projections.AttemptOK && len(a.Content) > 0 && !sameParts(a.Content, r.Content) {
			fmt.Fprintf(b, "\nOutput of attempt %d:\n", a.Attempt)
			writeParts(b, a.Content)
		}
	}
}

func writeParts(b *bytes.Buffer, parts []events.Part) {
	for _, p := range parts {
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

func sameParts(x, y []events.Part) bool {
	a, _ := json.Marshal(x)
	b, _ := json.Marshal(y)
	return bytes.Equal(a, b)
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

// mdText makes text from the log (model output, reasons, errors: anything
// a hostile model may have written) inert as Markdown: on one line, with
// the characters that start raw HTML, a link or a code span escaped, so a
// renderer shows it as the text it is.
func mdText(s string) string {
	return mdEscaper.Replace(oneLine(s))
}

var mdEscaper = strings.NewReplacer(`\`, `\\`, "<", `\<`, ">", `\>`, "[", `\[`, "]", `\]`, "`", "\\`", "&", `\&`)

// codeSpan writes s as an inline code span whose backtick run is longer
// than any in s, so s cannot end it.
func codeSpan(s string) string {
	s = oneLine(s)
	longest, run := 0, 0
	for _, c := range s {
		if c == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	f := strings.Repeat("`", longest+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return f + s + f
}
