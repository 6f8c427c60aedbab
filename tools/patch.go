package tools

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// ErrInvalidPatch is wrapped by the *PatchError ParsePatch returns for a
// patch that does not follow the format (see docs/tools/apply_patch.md).
var ErrInvalidPatch = errors.New("tools: invalid patch")

// ErrPatchMismatch is wrapped by the error apply_patch returns when a hunk's
// context and removed lines, or an @@ line, are not in the file where the
// patch says they are. Nothing is written then.
var ErrPatchMismatch = errors.New("tools: patch does not match the file")

// PatchError is a patch that does not parse: the 1-based line of the patch
// text where the problem is, and what is wrong there. It matches
// ErrInvalidPatch with errors.Is.
type PatchError struct {
	Line int
	Msg  string
}

// Error says "tools: invalid patch at patch line N: " and what is wrong.
func (e *PatchError) Error() string {
	return fmt.Sprintf("%v at patch line %d: %s", ErrInvalidPatch, e.Line, e.Msg)
}

// Unwrap returns ErrInvalidPatch.
func (e *PatchError) Unwrap() error { return ErrInvalidPatch }

// The marker lines of the patch format.
const (
	patchBegin     = "*** Begin Patch"
	patchEnd       = "*** End Patch"
	patchAdd       = "*** Add File: "
	patchUpdate    = "*** Update File: "
	patchDelete    = "*** Delete File: "
	patchMove      = "*** Move to: "
	patchEndOfFile = "*** End of File"
)

// PatchOp is what a FilePatch does to its file.
type PatchOp string

// The three file operations; an update with MoveTo set also renames.
const (
	PatchAdd    PatchOp = "add"
	PatchUpdate PatchOp = "update"
	PatchDelete PatchOp = "delete"
)

// Patch is a parsed apply_patch patch: the files it changes, in patch order.
// Print it back with String.
type Patch struct {
	Files []FilePatch
}

// FilePatch is the change to one file.
type FilePatch struct {
	Op PatchOp
	// Path is the file as the patch names it, without surrounding blanks.
	Path string
	// MoveTo is the new path of an updated file that is also renamed ("" when
	// it stays).
	MoveTo string
	// Lines are the lines of an added file, without their "+".
	Lines []string
	// Hunks are the changes to an updated file, in file order.
	Hunks []Hunk
	// Line is the patch line of the file's header.
	Line int
}

// Hunk is one change to an updated file.
type Hunk struct {
	// Anchors are the texts of the hunk's @@ lines, each found in the file
	// (after the previous one) before the hunk's lines are looked for. A
	// bare "@@" adds none.
	Anchors []string
	// Lines are the hunk's context, removed and added lines.
	Lines []HunkLine
	// EndOfFile says the hunk's old lines end the file ("*** End of File").
	EndOfFile bool
	// Line is the patch line where the hunk starts.
	Line int
}

// HunkLine is one line of a hunk.
type HunkLine struct {
	// Kind is ' ' for context, '-' for a removed line, '+' for an added one.
	Kind byte
	// Text is the line without its kind and line break.
	Text string
	// Line is its patch line.
	Line int
}

// oldLines returns the lines the hunk expects in the file: context and removed.
func (h *Hunk) oldLines() []string {
	var out []string
	for _, l := range h.Lines {
		if l.Kind != '+' {
			out = append(out, l.Text)
		}
	}
	return out
}

// newLines returns the lines the hunk leaves: context and added.
func (h *Hunk) newLines() []string {
	var out []string
	for _, l := range h.Lines {
		if l.Kind != '-' {
			out = append(out, l.Text)
		}
	}
	return out
}

// unifiedHeader matches a unified-diff hunk header, "@@ -12,5 +12,6 @@ func
// f()", which models often write: its line numbers are ignored and the text
// after it, if any, is the anchor.
var unifiedHeader = regexp.MustCompile(`^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@ ?(.*)$`)

// ParsePatch parses a patch in the apply_patch format:
//
//	*** Begin Patch
//	*** Add File: path/new.txt
//	+line one
//	*** Update File: path/existing.go
//	*** Move to: path/renamed.go
//	@@ func anchor()
//	 context line
//	-removed line
//	+added line
//	*** End of File
//	*** Delete File: path/old.txt
//	*** End Patch
//
// Blank lines before "*** Begin Patch" and after "*** End Patch" are ignored,
// and so is a carriage return at the end of any line. Whitespace around the
// Begin and End markers and around file headers ("*** Add File:", "***
// Update File:", "*** Delete File:", "*** Move to:") is ignored too, as
// codex's parser ignores it, but among an update's hunks a line starting
// with a space is a context line, whatever it holds. Inside an update hunk
// an empty line is an empty context line; "@@" lines start at the
// beginning of their line. A file may appear once, as a path or a Move to
// target.
//
// The error is a *PatchError (matching ErrInvalidPatch) naming the patch line
// and what is wrong. ParsePatch reads no file; it is safe for concurrent use.
func ParsePatch(text string) (*Patch, error) {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, "\r")
	}
	first, last := 0, len(lines)-1
	for first <= last && strings.TrimSpace(lines[first]) == "" {
		first++
	}
	for last >= first && strings.TrimSpace(lines[last]) == "" {
		last--
	}
	if first > last {
		return nil, &PatchError{Line: 1, Msg: "the patch is empty; it starts with \"" + patchBegin + "\" and ends with \"" + patchEnd + "\""}
	}
	if strings.TrimSpace(lines[first]) != patchBegin {
		return nil, &PatchError{Line: first + 1, Msg: fmt.Sprintf("the patch must start with %q, found %q", patchBegin, cutText(lines[first]))}
	}
	if first == last || strings.TrimSpace(lines[last]) != patchEnd {
		return nil, &PatchError{Line: last + 1, Msg: fmt.Sprintf("the patch must end with %q, found %q", patchEnd, cutText(lines[last]))}
	}
	p := &parser{lines: lines, i: first + 1, end: last, seen: map[string]int{}}
	patch := &Patch{}
	for p.i < p.end {
		fp, err := p.file()
		if err != nil {
			return nil, err
		}
		patch.Files = append(patch.Files, fp)
	}
	if len(patch.Files) == 0 {
		return nil, &PatchError{Line: last + 1, Msg: "the patch changes no file; add an \"*** Add File:\", \"*** Update File:\" or \"*** Delete File:\" section"}
	}
	return patch, nil
}

// parser walks the lines between the begin and end markers.
type parser struct {
	lines []string
	i     int // the next line, 0-based
	end   int // the index of the end marker
	// seen maps each cleaned path to the patch line that names it.
	seen map[string]int
}

func (p *parser) errorf(i int, format string, args ...any) *PatchError {
	return &PatchError{Line: i + 1, Msg: fmt.Sprintf(format, args...)}
}

// header says which file header l is (patchAdd, patchUpdate, patchDelete
// or patchMove; "" for none) and returns the rest of the line after it.
// Whitespace around the line is ignored, as codex's parser does; a header
// that names no path ("*** Delete File:") is still that header, with an
// empty rest.
func header(l string) (kind, rest string) {
	t := strings.TrimSpace(l)
	for _, h := range []string{patchAdd, patchUpdate, patchDelete, patchMove} {
		if r, ok := strings.CutPrefix(t, h); ok {
			return h, strings.TrimSpace(r)
		}
		if t == strings.TrimSpace(h) {
			return h, ""
		}
	}
	return "", ""
}

// isFileHeader reports whether l starts a new file section (or ends the
// patch early, which the caller reports), whitespace around it ignored.
// Among an update's hunks (inHunks) a line that starts with a space is a
// context line, whatever follows, as in codex's parser: a file may hold a
// line "*** Add File: x", and a patch must be able to keep it as context.
func isFileHeader(l string, inHunks bool) bool {
	if inHunks && strings.HasPrefix(l, " ") {
		return false
	}
	switch k, _ := header(l); k {
	case patchAdd, patchUpdate, patchDelete:
		return true
	}
	t := strings.TrimSpace(l)
	return t == patchEnd || t == patchBegin
}

// path checks the path a header at patch line i named (rest) and that it is
// named once.
func (p *parser) path(i int, kind, rest string) (string, error) {
	path := rest
	if path == "" {
		return "", p.errorf(i, "%q names no path", strings.TrimSpace(kind))
	}
	if strings.IndexByte(path, 0) >= 0 {
		return "", p.errorf(i, "the path %q holds a NUL byte", path)
	}
	key := filepath.Clean(path)
	if prev, ok := p.seen[key]; ok {
		return "", p.errorf(i, "%s is already changed at patch line %d; put every change to a file in one section", path, prev)
	}
	p.seen[key] = i + 1
	return path, nil
}

// file parses one file section.
func (p *parser) file() (FilePatch, error) {
	i := p.i
	l := p.lines[i]
	kind, rest := header(l)
	switch kind {
	case patchAdd:
		path, err := p.path(i, kind, rest)
		if err != nil {
			return FilePatch{}, err
		}
		fp := FilePatch{Op: PatchAdd, Path: path, Line: i + 1, Lines: []string{}}
		for p.i = i + 1; p.i < p.end && !isFileHeader(p.lines[p.i], false); p.i++ {
			text, ok := strings.CutPrefix(p.lines[p.i], "+")
			if !ok {
				return FilePatch{}, p.errorf(p.i, "every line of an added file starts with \"+\", found %q", cutText(p.lines[p.i]))
			}
			fp.Lines = append(fp.Lines, text)
		}
		return fp, p.noNestedMarker()
	case patchDelete:
		path, err := p.path(i, kind, rest)
		if err != nil {
			return FilePatch{}, err
		}
		p.i = i + 1
		if p.i < p.end && !isFileHeader(p.lines[p.i], false) {
			return FilePatch{}, p.errorf(p.i, "a deleted file takes no lines, found %q; start the next file with a \"*** \" header", cutText(p.lines[p.i]))
		}
		return FilePatch{Op: PatchDelete, Path: path, Line: i + 1}, p.noNestedMarker()
	case patchUpdate:
		path, err := p.path(i, kind, rest)
		if err != nil {
			return FilePatch{}, err
		}
		fp := FilePatch{Op: PatchUpdate, Path: path, Line: i + 1}
		p.i = i + 1
		if p.i < p.end {
			if k, r := header(p.lines[p.i]); k == patchMove {
				if fp.MoveTo, err = p.path(p.i, k, r); err != nil {
					return FilePatch{}, err
				}
				p.i++
			}
		}
		if err := p.hunks(&fp); err != nil {
			return FilePatch{}, err
		}
		if len(fp.Hunks) == 0 && fp.MoveTo == "" {
			return FilePatch{}, p.errorf(i, "the update of %s has no hunk; give @@ hunks with context, - and + lines", path)
		}
		return fp, p.noNestedMarker()
	case patchMove:
		return FilePatch{}, p.errorf(i, "%q must follow the \"*** Update File:\" line of the file it moves", strings.TrimSpace(patchMove))
	}
	return FilePatch{}, p.errorf(i, "expected a file header (%q, %q or %q) or %q, found %q",
		strings.TrimSpace(patchAdd), strings.TrimSpace(patchUpdate), strings.TrimSpace(patchDelete), patchEnd, cutText(l))
}

// noNestedMarker refuses a second "*** Begin Patch", or an "*** End Patch"
// before the last line (two patches pasted together).
func (p *parser) noNestedMarker() error {
	if p.i < p.end {
		switch strings.TrimSpace(p.lines[p.i]) {
		case patchBegin:
			return p.errorf(p.i, "%q inside the patch; send one patch", patchBegin)
		case patchEnd:
			return p.errorf(p.i, "%q before the end of the patch; send one patch", patchEnd)
		}
	}
	return nil
}

// hunks parses the hunks of an update, up to the next file header.
func (p *parser) hunks(fp *FilePatch) error {
	var h *Hunk
	closed := false // the current hunk has "*** End of File"
	flush := func() error {
		if h == nil {
			return nil
		}
		if len(h.Lines) == 0 {
			return p.errorf(h.Line-1, "the hunk has no lines; give context, - and + lines after its @@ line")
		}
		fp.Hunks = append(fp.Hunks, *h)
		h = nil
		return nil
	}
	for ; p.i < p.end && !isFileHeader(p.lines[p.i], true); p.i++ {
		l := p.lines[p.i]
		switch {
		case strings.HasPrefix(l, "@@"):
			if h != nil && len(h.Lines) == 0 {
				// Consecutive @@ lines narrow the search step by step.
				a, err := p.anchor(p.i)
				if err != nil {
					return err
				}
				if a != "" {
					h.Anchors = append(h.Anchors, a)
				}
				continue
			}
			if err := flush(); err != nil {
				return err
			}
			a, err := p.anchor(p.i)
			if err != nil {
				return err
			}
			h, closed = &Hunk{Line: p.i + 1}, false
			if a != "" {
				h.Anchors = []string{a}
			}
		case strings.TrimRight(l, " \t") == patchEndOfFile:
			if h == nil || len(h.Lines) == 0 {
				return p.errorf(p.i, "%q must follow the lines of a hunk", patchEndOfFile)
			}
			h.EndOfFile, closed = true, true
		case strings.HasPrefix(l, "***"):
			return p.errorf(p.i, "unknown marker %q in the update of %s; markers are %q, %q, and the file headers", cutText(l), fp.Path, patchMove+"<path>", patchEndOfFile)
		default:
			kind, text := byte(' '), ""
			if l != "" {
				kind, text = l[0], l[1:]
			}
			if kind != ' ' && kind != '-' && kind != '+' {
				return p.errorf(p.i, "a hunk line starts with ' ' (context), '-' (removed) or '+' (added), found %q", cutText(l))
			}
			if closed {
				return p.errorf(p.i, "a line after %q; start a new hunk with @@", patchEndOfFile)
			}
			if h == nil {
				if len(fp.Hunks) > 0 {
					return p.errorf(p.i, "a hunk line outside a hunk; start each hunk with an @@ line")
				}
				// The first hunk may leave out its @@ line.
				h = &Hunk{Line: p.i + 1}
			}
			h.Lines = append(h.Lines, HunkLine{Kind: kind, Text: text, Line: p.i + 1})
		}
	}
	return flush()
}

// anchor returns the text of the @@ line at i: "" for a bare "@@" or a
// unified-diff range without text.
func (p *parser) anchor(i int) (string, error) {
	l := strings.TrimRight(p.lines[i], " \t")
	if m := unifiedHeader.FindStringSubmatch(l); m != nil {
		return strings.TrimSpace(m[1]), nil
	}
	if l == "@@" {
		return "", nil
	}
	a, ok := strings.CutPrefix(l, "@@ ")
	if !ok {
		return "", p.errorf(i, "an @@ line is \"@@\" or \"@@ \" followed by a line of the file to anchor on, found %q", cutText(l))
	}
	return strings.TrimSpace(a), nil
}

// String prints the patch in the format ParsePatch reads; parsing it gives
// the same patch but for the Line fields.
func (p *Patch) String() string {
	var b strings.Builder
	b.WriteString(patchBegin + "\n")
	for _, fp := range p.Files {
		switch fp.Op {
		case PatchAdd:
			b.WriteString(patchAdd + fp.Path + "\n")
			for _, l := range fp.Lines {
				b.WriteString("+" + l + "\n")
			}
		case PatchDelete:
			b.WriteString(patchDelete + fp.Path + "\n")
		case PatchUpdate:
			b.WriteString(patchUpdate + fp.Path + "\n")
			if fp.MoveTo != "" {
				b.WriteString(patchMove + fp.MoveTo + "\n")
			}
			for _, h := range fp.Hunks {
				if len(h.Anchors) == 0 {
					b.WriteString("@@\n")
				}
				for _, a := range h.Anchors {
					b.WriteString("@@ " + a + "\n")
				}
				for _, l := range h.Lines {
					b.WriteByte(l.Kind)
					b.WriteString(l.Text + "\n")
				}
				if h.EndOfFile {
					b.WriteString(patchEndOfFile + "\n")
				}
			}
		}
	}
	b.WriteString(patchEnd + "\n")
	return b.String()
}

// Paths returns every path the patch writes or removes, as it names them:
// added, updated and deleted files, and both ends of a move.
func (p *Patch) Paths() []string {
	var out []string
	for _, fp := range p.Files {
		out = append(out, fp.Path)
		if fp.MoveTo != "" {
			out = append(out, fp.MoveTo)
		}
	}
	return out
}

// cutText shortens a line quoted in an error.
func cutText(s string) string {
	const n = 120
	if len(s) <= n {
		return s
	}
	return cutLine(s, n)
}
