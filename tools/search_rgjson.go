package tools

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// rgLine is one line rg --json reported: a match or a context line.
type rgLine struct {
	Path  string
	Line  int64
	Text  string
	Match bool
}

// rgMessage is the part of an rg --json message grep reads. begin, end and
// summary messages are recognised by type and skipped.
type rgMessage struct {
	Type string `json:"type"`
	Data struct {
		Path       *rgText `json:"path"`
		Lines      *rgText `json:"lines"`
		LineNumber *int64  `json:"line_number"`
	} `json:"data"`
}

// rgText is rg's arbitrary data: UTF-8 text, or base64 bytes when it is not
// valid UTF-8.
type rgText struct {
	Text  *string `json:"text"`
	Bytes *string `json:"bytes"`
}

func (t *rgText) decode() (string, error) {
	switch {
	case t == nil:
		return "", errors.New("missing")
	case t.Text != nil:
		return *t.Text, nil
	case t.Bytes != nil:
		b, err := base64.StdEncoding.DecodeString(*t.Bytes)
		if err != nil {
			return "", fmt.Errorf("bad base64: %v", err)
		}
		return string(b), nil
	}
	return "", errors.New("neither text nor bytes")
}

// decodeRgMessage decodes one line of rg --json output. It returns ok=false
// for a message grep does not show (begin, end, summary, or a type it does not
// know, for rg versions to come), and an error for a malformed match or
// context message. The text keeps its bytes; its line terminator is removed.
func decodeRgMessage(b []byte) (l rgLine, ok bool, err error) {
	var m rgMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return rgLine{}, false, fmt.Errorf("not a JSON message: %v", err)
	}
	switch m.Type {
	case "match", "context":
	default:
		return rgLine{}, false, nil
	}
	if l.Path, err = m.Data.Path.decode(); err != nil {
		return rgLine{}, false, fmt.Errorf("%s message: path: %v", m.Type, err)
	}
	if l.Text, err = m.Data.Lines.decode(); err != nil {
		return rgLine{}, false, fmt.Errorf("%s message: lines: %v", m.Type, err)
	}
	if m.Data.LineNumber == nil || *m.Data.LineNumber < 1 {
		return rgLine{}, false, fmt.Errorf("%s message: no line number", m.Type)
	}
	l.Line = *m.Data.LineNumber
	l.Match = m.Type == "match"
	l.Text = strings.TrimSuffix(l.Text, "\n")
	l.Text = strings.TrimSuffix(l.Text, "\r")
	return l, true, nil
}

// grepLimits bound the decoding of one rg --json stream.
type grepLimits struct {
	// matches is the most match lines kept; the next one ends the stream.
	matches int
	// context is the number of context lines asked for, used to drop the
	// context that belongs to a match past the limit.
	context int
	// bytes caps what is read of the stream; maxLine caps one message.
	bytes   int64
	maxLine int
}

// grepHits is what a decoded stream holds.
type grepHits struct {
	// lines are the matches and context lines, in path then line order.
	lines []rgLine
	// matches counts the match lines among them.
	matches int
	// cut says the stream was not read to its end ("" when it was).
	cut string
	// skipped counts messages over the line cap, which are dropped.
	skipped int
}

// decodeRgStream reads an rg --json stream with the bounds of lim and
// returns what it holds, stop=true when it stopped before the end (rg must
// then be killed), and an error for a message that does not decode, which
// ends the stream. It never holds more than lim.bytes of the stream, nor more
// than lim.matches match lines.
func decodeRgStream(r io.Reader, lim grepLimits) (hits grepHits, stop bool, err error) {
	lr := newLineReader(r, lim.maxLine, lim.bytes)
	n := 0
	for {
		b, long, rerr := lr.next()
		if errors.Is(rerr, errOverBudget) {
			hits.cut = fmt.Sprintf("(stopped after %d bytes of rg output; narrow the pattern, path or glob)\n", lim.bytes)
			stop = true
			break
		}
		if rerr != nil {
			break // io.EOF, or a broken pipe once rg is gone
		}
		n++
		if long {
			hits.skipped++
			continue
		}
		if len(b) == 0 {
			continue
		}
		l, ok, derr := decodeRgMessage(b)
		if derr != nil {
			err = fmt.Errorf("grep: cannot decode line %d of rg's output: %v", n, derr)
			stop = true
			break
		}
		if !ok {
			continue
		}
		if l.Match && hits.matches == lim.matches {
			hits.cut = fmt.Sprintf("(stopped at %d matching lines; more follow: narrow the pattern, path or glob, or raise limit, at most %d)\n", lim.matches, MaxGrepLimit)
			stop = true
			break
		}
		if l.Match {
			hits.matches++
		}
		hits.lines = append(hits.lines, l)
	}
	if stop {
		hits.lines = trimTrailingContext(hits.lines, lim.context)
	}
	// rg --sort path already reports in this order; sorting again keeps
	// the promise whatever rg does.
	slices.SortStableFunc(hits.lines, func(a, b rgLine) int {
		if c := comparePaths(a.Path, b.Path); c != 0 {
			return c
		}
		switch {
		case a.Line < b.Line:
			return -1
		case a.Line > b.Line:
			return 1
		}
		return 0
	})
	return hits, stop, err
}

// trimTrailingContext drops the context lines at the end of a stream cut
// short that do not follow the last match kept within context lines: they
// are the leading context of a match that was not kept.
func trimTrailingContext(lines []rgLine, ctxLines int) []rgLine {
	last := -1
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i].Match {
			last = i
			break
		}
	}
	keep := last + 1
	for keep < len(lines) {
		l := lines[keep]
		if last < 0 || l.Path != lines[last].Path || l.Line <= lines[last].Line || l.Line > lines[last].Line+int64(ctxLines) {
			break
		}
		keep++
	}
	return lines[:keep]
}

// formatGrep renders lines as rg prints them with --no-heading
// --with-filename --line-number: "path:line:text" for a match and
// "path-line-text" for context, a line "--" between groups that are not
// contiguous (only when context lines were asked for, as rg does). dir
// prefixes each path; lines are cut at MaxGrepLineBytes.
func formatGrep(lines []rgLine, dir string, ctxLines int) string {
	var b strings.Builder
	for i, l := range lines {
		if ctxLines > 0 && i > 0 {
			prev := lines[i-1]
			if prev.Path != l.Path || prev.Line+1 != l.Line {
				b.WriteString("--\n")
			}
		}
		sep := byte('-')
		if l.Match {
			sep = ':'
		}
		b.WriteString(joinRel(dir, strings.ToValidUTF8(l.Path, "\uFFFD")))
		b.WriteByte(sep)
		fmt.Fprintf(&b, "%d", l.Line)
		b.WriteByte(sep)
		b.WriteString(cutLine(l.Text, MaxGrepLineBytes))
		b.WriteByte('\n')
	}
	return b.String()
}

// cutLine returns s as valid UTF-8, cut at a rune boundary at most n bytes
// in, with a note saying how much was cut.
func cutLine(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return strings.ToValidUTF8(s[:i], "\uFFFD") + fmt.Sprintf(" … [line cut: %d more bytes]", len(s)-i)
}
