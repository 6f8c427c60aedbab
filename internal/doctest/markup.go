package doctest

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// Marker opens every directive: an HTML comment "<!-- doctest: ... -->".
const Marker = "doctest:"

// DefaultTimeout bounds one step unless its directive says timeout=D.
const DefaultTimeout = 60 * time.Second

// shellInfos are the info strings of fences that hold commands: each needs
// a directive.
var shellInfos = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "zsh": true, "sh-session": true}

// Step is one thing a session does, in document order: run a shown block
// of commands, or run a hidden setup.
type Step struct {
	// File and Line locate the directive.
	File string
	Line int
	// Session names the shell the step runs in.
	Session string
	// Setup is true for a hidden setup (its commands are the comment's);
	// false for a shown block.
	Setup bool
	// Background starts the block's commands in the background and
	// compares their standard output with Expect once it has printed that
	// many lines; standard error is kept for a failure's report.
	Background bool
	// Status is the exit status expected of the last segment (0 unless
	// status=N); every other segment must exit 0.
	Status int
	// Timeout bounds the step.
	Timeout time.Duration
	// Segments are the step's commands, each with the output it expects.
	Segments []Segment
}

// Segment is commands and the output they are documented to print: the
// "# " comment lines that follow them in the block, or, for a block's last
// segment, the fenced block right after it.
type Segment struct {
	// Line is the first line of Script in the file.
	Line   int
	Script string
	// Expect is the documented output (empty: none).
	Expect string
	// JSON compares Expect and the output as JSON text: whitespace
	// outside strings does not count (an expected ```json block).
	JSON bool
	// ExpectLine is the line the expected output starts on.
	ExpectLine int
}

// Skip is a shell block marked as not run, with why.
type Skip struct {
	File   string
	Line   int
	Reason string
}

// Doc is what one Markdown file asks of the test.
type Doc struct {
	File  string
	Steps []Step
	Skips []Skip
	// Blocks counts the fenced blocks of commands (run or skipped).
	Blocks int
}

// Problem is a mistake in a file's markup, at a line.
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) Error() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

var md = goldmark.New()

// Parse reads a Markdown file's directives and fenced blocks. Every block
// of commands (```sh and its kin) must follow a directive, "run SESSION"
// or "skip REASON"; a fence without an info string, or a text block that
// shows a "$ " prompt, is a problem too, so that commands cannot slip past
// unmarked. Parse returns every problem it finds.
func Parse(file string, src []byte) (*Doc, []Problem) {
	d := &Doc{File: file}
	var probs []Problem
	bad := func(line int, format string, args ...any) {
		probs = append(probs, Problem{file, line, fmt.Sprintf(format, args...)})
	}
	lines := lineStarts(src)
	root := md.Parser().Parse(text.NewReader(src))
	var nodes []ast.Node
	ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n.(type) {
		case *ast.FencedCodeBlock, *ast.HTMLBlock:
			nodes = append(nodes, n)
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	used := map[ast.Node]bool{} // fences taken as expected output
	for i, n := range nodes {
		switch n := n.(type) {
		case *ast.HTMLBlock:
			body, first, last := htmlText(n, src, lines)
			dir, ok, err := parseDirective(body)
			if err != nil {
				bad(first, "%v", err)
				continue
			}
			if !ok {
				continue
			}
			var fence *ast.FencedCodeBlock
			if i+1 < len(nodes) {
				if f, isFence := nodes[i+1].(*ast.FencedCodeBlock); isFence && fenceLines(f, src, lines).open == last+1 {
					fence = f
				}
			}
			switch dir.kind {
			case "setup":
				if fence != nil {
					bad(first, "a setup directive must not sit right above a fenced block (it runs hidden commands; mark the block with its own run or skip)")
					continue
				}
				d.Steps = append(d.Steps, Step{File: file, Line: first, Session: dir.session, Setup: true, Timeout: dir.timeout,
					Segments: []Segment{{Line: first + 1, Script: dir.script}}})
			case "skip", "run":
				if fence == nil {
					bad(first, "a %s directive must be the line right above the fenced block it marks", dir.kind)
					continue
				}
				fl := fenceLines(fence, src, lines)
				if !shellInfos[infoWord(fence, src)] {
					bad(first, "a %s directive marks a block of commands (```sh), not ```%s", dir.kind, infoWord(fence, src))
					continue
				}
				if dir.kind == "skip" {
					d.Skips = append(d.Skips, Skip{file, fl.open, dir.reason})
					continue
				}
				body := blockText(fence, src)
				segs, err := splitSegments(body, fl.open+1)
				if err != nil {
					bad(fl.open, "%v", err)
					continue
				}
				if i+2 < len(nodes) {
					if out, isFence := nodes[i+2].(*ast.FencedCodeBlock); isFence && !shellInfos[infoWord(out, src)] && fenceLines(out, src, lines).open == fl.close+1 {
						used[out] = true
						lastSeg := &segs[len(segs)-1]
						if lastSeg.Expect != "" || strings.TrimSpace(lastSeg.Script) == "" {
							bad(fenceLines(out, src, lines).open, "this block follows a run block whose last command's output its comments already give: put a blank line or prose between them")
							continue
						}
						lastSeg.Expect = blockText(out, src)
						lastSeg.JSON = infoWord(out, src) == "json"
						lastSeg.ExpectLine = fenceLines(out, src, lines).open + 1
					}
				}
				if dir.background && (len(segs) != 1 || segs[0].Expect == "") {
					bad(fl.open, "a background block is one command whose standard output follows it, in the next block or its comments")
					continue
				}
				d.Steps = append(d.Steps, Step{File: file, Line: first, Session: dir.session, Background: dir.background,
					Status: dir.status, Timeout: dir.timeout, Segments: segs})
			}
		case *ast.FencedCodeBlock:
			info := infoWord(n, src)
			fl := fenceLines(n, src, lines)
			if shellInfos[info] {
				d.Blocks++
				if !marked(nodes, i, src, lines) {
					bad(fl.open, "a block of commands (```%s) without a directive: put <!-- doctest: run SESSION --> or <!-- doctest: skip REASON --> on the line above it (internal/doctest/doc.go)", info)
				}
				continue
			}
			if info == "" {
				bad(fl.open, "a fenced block without an info string: say what it holds (```sh for commands, ```text for output, ```json …)")
				continue
			}
			if used[n] {
				continue
			}
			if first, _, _ := strings.Cut(blockText(n, src), "\n"); strings.HasPrefix(first, "$ ") {
				bad(fl.open, "a ```%s block shows a \"$ \" prompt: commands go in a ```sh block with a directive, their output in its \"# \" comments or the block after it", info)
			}
		}
	}
	return d, probs
}

// marked reports whether the fence nodes[i] has a directive right above it.
func marked(nodes []ast.Node, i int, src []byte, lines []int) bool {
	if i == 0 {
		return false
	}
	h, ok := nodes[i-1].(*ast.HTMLBlock)
	if !ok {
		return false
	}
	body, _, last := htmlText(h, src, lines)
	dir, ok, err := parseDirective(body)
	return err == nil && ok && dir.kind != "setup" && last+1 == fenceLines(nodes[i].(*ast.FencedCodeBlock), src, lines).open
}

type directive struct {
	kind       string // run, skip, setup
	session    string
	reason     string
	script     string
	background bool
	status     int
	timeout    time.Duration
}

var sessionName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// parseDirective reads an HTML comment's text. ok is false for a comment
// that is not a directive.
func parseDirective(comment string) (directive, bool, error) {
	s := strings.TrimSpace(comment)
	if !strings.HasPrefix(s, "<!--") {
		return directive{}, false, nil
	}
	s = strings.TrimSpace(strings.TrimPrefix(s, "<!--"))
	if !strings.HasPrefix(s, Marker) {
		return directive{}, false, nil
	}
	s, ok := strings.CutSuffix(strings.TrimRightFunc(s, isSpace), "-->")
	if !ok {
		return directive{}, false, fmt.Errorf("a doctest directive is one HTML comment, ending with -->")
	}
	s = strings.TrimPrefix(s, Marker)
	head, script, _ := strings.Cut(s, "\n")
	fields := strings.Fields(head)
	if len(fields) == 0 {
		return directive{}, false, fmt.Errorf("an empty doctest directive: want run SESSION, skip REASON or setup SESSION")
	}
	d := directive{kind: fields[0], timeout: DefaultTimeout}
	switch d.kind {
	case "skip":
		d.reason = strings.TrimSpace(strings.Join(fields[1:], " ") + "\n" + script)
		if d.reason == "" {
			return d, false, fmt.Errorf("a skip directive says why the block is not run: <!-- doctest: skip REASON -->")
		}
		return d, true, nil
	case "run", "setup":
	default:
		return d, false, fmt.Errorf("doctest directive %q: want run SESSION, skip REASON or setup SESSION", d.kind)
	}
	if len(fields) < 2 || !sessionName.MatchString(fields[1]) {
		return d, false, fmt.Errorf("a %s directive names its session (lower-case letters, digits, - and _): <!-- doctest: %s SESSION -->", d.kind, d.kind)
	}
	d.session = fields[1]
	for _, opt := range fields[2:] {
		k, v, _ := strings.Cut(opt, "=")
		switch {
		case k == "background" && v == "" && d.kind == "run":
			d.background = true
		case k == "status" && d.kind == "run":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 255 {
				return d, false, fmt.Errorf("status=%q: want the last command's exit status, 0 to 255", v)
			}
			d.status = n
		case k == "timeout":
			t, err := time.ParseDuration(v)
			if err != nil || t <= 0 {
				return d, false, fmt.Errorf("timeout=%q: want a duration such as 90s", v)
			}
			d.timeout = t
		default:
			return d, false, fmt.Errorf("doctest %s: unknown option %q (run takes background, status=N and timeout=D; setup takes timeout=D)", d.kind, opt)
		}
	}
	if d.kind == "setup" {
		d.script = script
		if strings.TrimSpace(script) == "" {
			return d, false, fmt.Errorf("a setup directive holds its commands on the lines after <!-- doctest: setup SESSION")
		}
	} else if strings.TrimSpace(script) != "" {
		return d, false, fmt.Errorf("a run directive is one line; hidden commands go in a setup directive")
	}
	return d, true, nil
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// splitSegments cuts a block of commands at its output comments: full-line
// "# " comments right after a command line (no blank line between) are that
// command's output; a comment after a blank line, or before any command, is
// prose. Lines inside a quoted string or after a backslash continuation
// are never comments.
func splitSegments(body string, firstLine int) ([]Segment, error) {
	var segs []Segment
	cur := Segment{Line: firstLine}
	var script, expect []string
	afterCommand := false // the previous line was a command (or its output)
	var st scanState
	flush := func(next int) {
		cur.Script = strings.Join(script, "\n")
		cur.Expect = strings.Join(expect, "\n")
		segs = append(segs, cur)
		cur = Segment{Line: next}
		script, expect = nil, nil
	}
	ls := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	for i, l := range ls {
		trimmed := strings.TrimLeft(l, " \t")
		if st.open() {
			st.scan(l)
			script = append(script, l)
			continue
		}
		switch {
		case strings.HasPrefix(trimmed, "#") && afterCommand:
			if cur.ExpectLine == 0 {
				cur.ExpectLine = firstLine + i
			}
			out := strings.TrimPrefix(trimmed, "#")
			out = strings.TrimPrefix(out, " ")
			expect = append(expect, out)
		case strings.HasPrefix(trimmed, "#"), trimmed == "":
			if len(expect) > 0 {
				flush(firstLine + i)
			}
			script = append(script, l)
			afterCommand = false
		default:
			if len(expect) > 0 {
				flush(firstLine + i)
			}
			st.scan(l)
			script = append(script, l)
			afterCommand = true
		}
	}
	if st.open() {
		return nil, fmt.Errorf("the block ends inside a quoted string or a continued line")
	}
	flush(0)
	if len(segs) > 1 && strings.TrimSpace(segs[len(segs)-1].Script) == "" && segs[len(segs)-1].Expect == "" {
		segs = segs[:len(segs)-1]
	}
	return segs, nil
}

// scanState follows quotes and continuations across the lines of a block.
type scanState struct {
	quote     byte // ' or " while inside one
	continued bool
}

func (s *scanState) open() bool { return s.quote != 0 || s.continued }

// scan reads one line, up to a comment outside quotes.
func (s *scanState) scan(l string) {
	s.continued = false
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch s.quote {
		case '\'':
			if c == '\'' {
				s.quote = 0
			}
			continue
		case '"':
			if c == '\\' {
				i++
			} else if c == '"' {
				s.quote = 0
			}
			continue
		}
		switch {
		case c == '\\' && i == len(l)-1:
			s.continued = true
		case c == '\\':
			i++
		case c == '\'' || c == '"':
			s.quote = c
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return
		}
	}
}

type fenceSpan struct{ open, close int }

// fenceLines finds the lines of a fence's opening and closing markers.
func fenceLines(f *ast.FencedCodeBlock, src []byte, lines []int) fenceSpan {
	var at int
	switch {
	case f.Lines().Len() > 0:
		at = lineOf(lines, f.Lines().At(0).Start) - 1
	case f.Info != nil:
		at = lineOf(lines, f.Info.Segment.Start)
	default:
		// An empty fence without info: find it from the node before.
		at = 1
		if p := f.PreviousSibling(); p != nil && p.Lines().Len() > 0 {
			at = lineOf(lines, p.Lines().At(p.Lines().Len()-1).Start) + 1
		}
	}
	return fenceSpan{open: at, close: at + f.Lines().Len() + 1}
}

// blockText is a fence's content with the fence's indentation removed.
func blockText(f *ast.FencedCodeBlock, src []byte) string {
	var b bytes.Buffer
	for i := 0; i < f.Lines().Len(); i++ {
		seg := f.Lines().At(i)
		b.Write(seg.Value(src))
	}
	return b.String()
}

func infoWord(f *ast.FencedCodeBlock, src []byte) string {
	if f.Info == nil {
		return ""
	}
	w, _, _ := strings.Cut(strings.TrimSpace(string(f.Info.Segment.Value(src))), " ")
	return w
}

// htmlText is an HTML block's source and its first and last lines.
func htmlText(h *ast.HTMLBlock, src []byte, lines []int) (string, int, int) {
	var b bytes.Buffer
	for i := 0; i < h.Lines().Len(); i++ {
		seg := h.Lines().At(i)
		b.Write(seg.Value(src))
	}
	if h.HasClosure() {
		cl := h.ClosureLine
		b.Write(cl.Value(src))
	}
	first := lineOf(lines, h.Lines().At(0).Start)
	last := first + h.Lines().Len() - 1
	if h.HasClosure() {
		last = lineOf(lines, h.ClosureLine.Start)
	}
	return b.String(), first, last
}

// lineStarts returns the offset each line starts at.
func lineStarts(src []byte) []int {
	starts := []int{0}
	for i, c := range src {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// lineOf is the 1-based line holding offset off.
func lineOf(starts []int, off int) int {
	lo, hi := 0, len(starts)
	for lo+1 < hi {
		mid := (lo + hi) / 2
		if starts[mid] <= off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + 1
}
