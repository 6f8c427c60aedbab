package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// patchArgs are the apply_patch tool's arguments.
type patchArgs struct {
	Patch string `json:"patch" jsonschema:"the patch: *** Begin Patch, then for each file *** Add File: PATH (lines starting with +), *** Delete File: PATH, or *** Update File: PATH (optionally *** Move to: NEWPATH) followed by hunks of an optional '@@ anchor line', then lines starting with ' ' (context), '-' (removed) or '+' (added); then *** End Patch"`
}

// PatchTool returns the apply_patch tool: side_effecting, never, exclusive.
// Its mutated paths are every path the patch adds, updates, deletes, or moves
// from or to (nil for a patch that does not parse), so the runtime
// checkpoints each file's pre-image before the call runs. The error is a
// *tool.RegistrationError only a broken build produces. Each call builds a
// new tool; it is safe for concurrent use.
func PatchTool() (*tool.Tool, error) {
	return tool.New("apply_patch",
		"Edit files with a patch: add, update (with context-checked hunks), move and delete files in one call. "+
			"Every hunk's context and removed lines must match the file; if any hunk of any file does not match, "+
			"no file is changed. Format:\n"+
			"*** Begin Patch\n*** Update File: src/app.py\n@@ def greet():\n-    print(\"hi\")\n+    print(\"hello\")\n"+
			"*** Add File: docs/note.md\n+new line\n*** Delete File: old.txt\n*** End Patch",
		runPatch,
		tool.WithShortDescription("Add, update, move and delete files with a context-checked patch."),
		tool.WithGuidelines(
			"Use apply_patch for edits to existing files: give each hunk about three lines of unchanged context before and after the change, copied exactly from the file.",
			"Read the file first; when the same lines occur more than once, add an @@ line with a nearby unique line (such as the function signature) to say which.",
			"Put every change to one file in one *** Update File section, hunks in file order. Use write to replace a whole file.",
		),
		tool.WithSnippet(`{"patch": "*** Begin Patch\n*** Update File: main.go\n@@ func main() {\n \tfmt.Println(\"start\")\n-\trun()\n+\tif err := run(); err != nil {\n+\t\tlog.Fatal(err)\n+\t}\n }\n*** End Patch"}`),
		tool.WithDeclarations(tool.Declarations{
			Effect:      tool.EffectSideEffecting,
			Replay:      tool.ReplayNever,
			Concurrency: tool.ConcurrencyExclusive,
		}),
		tool.WithMutatedPaths(func(a patchArgs) []string {
			p, err := ParsePatch(a.Patch)
			if err != nil {
				return nil
			}
			var out []string
			for _, path := range p.Paths() {
				for _, c := range cleanPaths(path) {
					if !slices.Contains(out, c) {
						out = append(out, c)
					}
				}
			}
			return out
		}),
	)
}

// runPatch is the apply_patch tool's function.
func runPatch(ctx context.Context, a patchArgs) (tool.Result, error) {
	ws, err := workspaceFrom(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	p, err := ParsePatch(a.Patch)
	if err != nil {
		return tool.Result{}, err
	}
	pl, err := planPatch(ws, p)
	if err != nil {
		return tool.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return tool.Result{}, err // nothing written yet: a cancelled call does nothing
	}
	if err := pl.commit(dirOps(ws)); err != nil {
		return tool.Result{}, err
	}
	return tool.Text(strings.Join(pl.summary, "\n") + "\n"), nil
}

// patchStep is one file-system change of a planned patch, with the
// pre-image that undoes it.
type patchStep struct {
	// name is the workspace-relative path operated on through the
	// workspace's os.Root; rel is the path to name in messages.
	name string
	rel  string
	// data is the new content; remove says the file is removed instead.
	data   []byte
	remove bool
	mode   fs.FileMode
	// existed says there was a file, whose content and mode were old and
	// oldMode; undoing writes them back. Else undoing removes the file.
	existed bool
	old     []byte
	oldMode fs.FileMode
}

// patchPlan is a patch computed in memory against the files as they are:
// every step to take, and the summary to report.
type patchPlan struct {
	steps []patchStep
	// dirs are the missing parent directories of added files, made before
	// the steps run and removed again (when empty) on rollback.
	dirs    []string
	summary []string
}

// fileOps are the writes a plan makes, on workspace-relative names; tests
// swap them to fail on purpose.
type fileOps struct {
	write  func(name string, data []byte, mode fs.FileMode) error
	remove func(name string) error
	mkdir  func(name string) error
}

// dirOps are the writes of a plan through the workspace ws: confined to it,
// and what they create given the workspace's owner.
func dirOps(ws *workspace.Dir) fileOps {
	return fileOps{
		write:  ws.WriteFile,
		remove: ws.Root().Remove,
		mkdir:  ws.Mkdir,
	}
}

// planPatch checks every file of p and computes every new content, reading
// but writing nothing. It refuses, naming the file: a path outside the
// workspace; an added file that exists; an updated, moved or deleted file
// that does not, or is not a regular file; a move onto an existing file; two
// sections that reach one file; and a hunk that does not match (wrapping
// ErrPatchMismatch).
//
// Paths are resolved with ws.Resolve: an update writes through a link
// inside the workspace to its target (real); a delete or a move removes
// the path itself (rel, its last component not followed). Every read and
// write goes through ws, so a directory swapped for a link meanwhile
// cannot lead out.
func planPatch(ws *workspace.Dir, p *Patch) (*patchPlan, error) {
	pl := &patchPlan{}
	claimed := map[string]string{} // resolved path -> the patch path that claims it
	claim := func(real, rel, as string) error {
		if rel == "." || real == "." {
			return fmt.Errorf("apply_patch: %s: that is the workspace directory itself; give a file path", as)
		}
		if prev, ok := claimed[real]; ok {
			return fmt.Errorf("apply_patch: %s and %s are the same file; put every change to a file in one section", prev, as)
		}
		claimed[real] = as
		return nil
	}
	var dirs []string
	for _, fp := range p.Files {
		rel, real, err := ws.Resolve(fp.Path)
		if err != nil {
			return nil, fmt.Errorf("apply_patch: %w", err)
		}
		if err := claim(real, rel, fp.Path); err != nil {
			return nil, err
		}
		switch fp.Op {
		case PatchAdd:
			if err := mustNotExist(ws, "add", rel); err != nil {
				return nil, err
			}
			missing, err := missingDirs(ws, filepath.Dir(real), rel)
			if err != nil {
				return nil, err
			}
			dirs = append(dirs, missing...)
			data := []byte(joinLines(fp.Lines, "\n", len(fp.Lines) > 0))
			pl.steps = append(pl.steps, patchStep{name: real, rel: rel, data: data, mode: newFileMode})
			pl.summary = append(pl.summary, "A "+rel)

		case PatchDelete:
			old, mode, err := readForPatch(ws, "apply_patch: delete", rel, rel, true, false)
			if err != nil {
				return nil, err
			}
			pl.steps = append(pl.steps, patchStep{name: rel, rel: rel, remove: true, existed: true, old: old, oldMode: mode})
			pl.summary = append(pl.summary, "D "+rel)

		case PatchUpdate:
			moving := fp.MoveTo != ""
			// An update writes through a link, as write does; a move
			// removes the path itself, so it takes regular files only.
			target := real
			if moving {
				target = rel
			}
			old, mode, err := readForPatch(ws, "apply_patch: update", target, rel, moving, true)
			if err != nil {
				return nil, err
			}
			data, err := applyHunks(rel, old, fp.Hunks)
			if err != nil {
				return nil, err
			}
			if !moving {
				pl.steps = append(pl.steps, patchStep{name: target, rel: rel, data: data, mode: mode, existed: true, old: old, oldMode: mode})
				pl.summary = append(pl.summary, "M "+rel)
				continue
			}
			drel, dst, err := ws.Resolve(fp.MoveTo)
			if err != nil {
				return nil, fmt.Errorf("apply_patch: %w", err)
			}
			if err := claim(dst, drel, fp.MoveTo); err != nil {
				return nil, err
			}
			if err := mustNotExist(ws, "move to", drel); err != nil {
				return nil, err
			}
			missing, err := missingDirs(ws, filepath.Dir(dst), drel)
			if err != nil {
				return nil, err
			}
			dirs = append(dirs, missing...)
			pl.steps = append(pl.steps,
				patchStep{name: dst, rel: drel, data: data, mode: mode},
				patchStep{name: rel, rel: rel, remove: true, existed: true, old: old, oldMode: mode})
			pl.summary = append(pl.summary, "R "+rel+" -> "+drel)
		}
	}
	// Parents first, each once.
	slices.Sort(dirs)
	pl.dirs = slices.Compact(dirs)
	return pl, nil
}

// mustNotExist refuses to create a file where there is one (a link, even a
// dangling one, counts).
func mustNotExist(ws *workspace.Dir, op, rel string) error {
	_, err := ws.Root().Lstat(rel)
	switch {
	case err == nil:
		if op == "add" {
			return fmt.Errorf("apply_patch: add %s: the file already exists; change it with *** Update File, or replace it whole with write", rel)
		}
		return fmt.Errorf("apply_patch: %s %s: the file already exists; a move does not replace a file", op, rel)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return nil // below a file: missingDirs says so
	}
	return fileError("apply_patch: "+op, rel, err)
}

// missingDirs returns the directories from dir (workspace-relative) up
// that do not exist, the outermost first, and refuses when the nearest
// existing one is not a directory.
func missingDirs(ws *workspace.Dir, dir, rel string) ([]string, error) {
	var missing []string
	for dir != "." {
		fi, err := ws.Root().Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return nil, fmt.Errorf("apply_patch: %s: a parent of it is a file, not a directory", rel)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fileError("apply_patch: create", rel, err)
		}
		missing = append(missing, dir)
		dir = filepath.Dir(dir)
	}
	slices.Reverse(missing)
	return missing, nil
}

// readForPatch reads a file to change (what is the operation, such as
// "apply_patch: update", that errors start with) through the workspace: a
// regular file (a link to one too, unless noLink) of at most MaxReadBytes.
// name is the workspace-relative path to read, rel the one to name. A file
// to update (checkText) must not look binary. The file is judged by what
// was opened (non-blocking, so a FIFO cannot hang the call); with noLink,
// the entry at name must be that same file.
func readForPatch(ws *workspace.Dir, what, name, rel string, noLink, checkText bool) ([]byte, fs.FileMode, error) {
	if noLink {
		switch fi, err := ws.Root().Lstat(name); {
		case err != nil:
			return nil, 0, fileError(what, rel, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return nil, 0, fmt.Errorf("%s %s: it is a symbolic link; moves and deletes take regular files only", what, rel)
		}
	}
	f, err := ws.Root().OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, fileError(what, rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, 0, fileError(what, rel, err)
	case fi.IsDir():
		return nil, 0, fmt.Errorf("%s %s: it is a directory; give a file path", what, rel)
	case !fi.Mode().IsRegular():
		return nil, 0, fmt.Errorf("%s %s: not a regular file (%s)", what, rel, fi.Mode().Type())
	case fi.Size() > MaxReadBytes:
		return nil, 0, fmt.Errorf("%s %s: the file is %d bytes, over the %d-byte limit", what, rel, fi.Size(), MaxReadBytes)
	}
	if noLink {
		// The entry may have been swapped for a link since the Lstat.
		if now, err := ws.Root().Lstat(name); err != nil || !os.SameFile(now, fi) {
			return nil, 0, fmt.Errorf("%s %s: the file changed while it was being read; try again", what, rel)
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxReadBytes+1))
	if err != nil {
		return nil, 0, fileError(what, rel, err)
	}
	if len(data) > MaxReadBytes {
		return nil, 0, fmt.Errorf("%s %s: the file grew over the %d-byte limit while it was being read", what, rel, MaxReadBytes)
	}
	if checkText {
		head := data[:min(len(data), sniffBytes)]
		if why := binaryReason(head, len(data) > sniffBytes); why != "" {
			return nil, 0, fmt.Errorf("%s %s: this looks like a binary file (%s); only text files can be edited", what, rel, why)
		}
	}
	return data, fi.Mode().Perm(), nil
}

// commit takes the plan's steps in order. If one fails, the steps already
// taken are undone from their in-memory pre-images, newest first, and the
// directories made are removed again; the error names the file that failed
// and any file that could not be restored.
func (pl *patchPlan) commit(ops fileOps) error {
	var made []string
	undo := func(done int, cause error) error {
		var bad []string
		for i := done - 1; i >= 0; i-- {
			s := pl.steps[i]
			var err error
			if s.existed {
				err = ops.write(s.name, s.old, s.oldMode)
			} else {
				err = ops.remove(s.name)
			}
			if err != nil {
				bad = append(bad, fileError("restore", s.rel, err).Error())
			}
		}
		for i := len(made) - 1; i >= 0; i-- {
			_ = ops.remove(made[i]) // only an empty directory goes
		}
		if len(bad) > 0 {
			return fmt.Errorf("%w; rolling back failed too, so these files are left changed: %s", cause, strings.Join(bad, ", "))
		}
		return fmt.Errorf("%w; the files already changed were restored, so nothing changed", cause)
	}
	for _, d := range pl.dirs {
		if err := ops.mkdir(d); err != nil && !errors.Is(err, fs.ErrExist) {
			return undo(0, fileError("apply_patch: create directory", d, err))
		}
		made = append(made, d)
	}
	for i, s := range pl.steps {
		var err error
		if s.remove {
			err = ops.remove(s.name)
		} else {
			err = ops.write(s.name, s.data, s.mode)
		}
		if err != nil {
			verb := "write"
			if s.remove {
				verb = "remove"
			}
			return undo(i, fileError("apply_patch: "+verb, s.rel, err))
		}
	}
	return nil
}

// fileText is a text file split into lines, with what joins them back.
type fileText struct {
	lines []string
	eol   string
	// finalEOL says the file ends with a line break.
	finalEOL bool
	// mixed says the file has both CRLF and lone LF line breaks. Its lines
	// are split at "\n" and keep their "\r" (each line keeps its own
	// ending); they are compared without it, and the lines a patch adds
	// end with addCR.
	mixed bool
	addCR string
}

// splitFile splits data into lines. A file whose every line break is "\r\n"
// is handled as CRLF: its lines are compared without the "\r" and the lines
// a patch adds get "\r\n" too. A file that mixes "\r\n" and "\n" keeps each
// line's ending; added lines take the more common one (CRLF on a tie).
func splitFile(data []byte) fileText {
	s := string(data)
	ft := fileText{eol: "\n"}
	n, crlf := strings.Count(s, "\n"), strings.Count(s, "\r\n")
	switch {
	case n > 0 && crlf == n:
		ft.eol = "\r\n"
	case crlf > 0:
		ft.mixed = true
		if crlf >= n-crlf {
			ft.addCR = "\r"
		}
	}
	if s == "" {
		return ft
	}
	ft.finalEOL = strings.HasSuffix(s, ft.eol)
	s = strings.TrimSuffix(s, ft.eol)
	ft.lines = strings.Split(s, ft.eol)
	return ft
}

// compared returns the lines as hunks are matched against them: without
// the "\r" of a mixed file's CRLF lines.
func (ft fileText) compared() []string {
	if !ft.mixed {
		return ft.lines
	}
	out := make([]string, len(ft.lines))
	for i, l := range ft.lines {
		out[i] = strings.TrimSuffix(l, "\r")
	}
	return out
}

// joinLines joins lines with eol, with a final eol when final is set and
// there is a line.
func joinLines(lines []string, eol string, final bool) string {
	if len(lines) == 0 {
		return ""
	}
	s := strings.Join(lines, eol)
	if final {
		s += eol
	}
	return s
}

// applyHunks returns data with hunks applied, or an error wrapping
// ErrPatchMismatch naming rel, the patch line and the expected text.
//
// Each hunk is looked for from where the previous one ended: first its @@
// anchors in turn (a line equal to the anchor, or equal once leading and
// trailing whitespace is ignored on both), then its context and removed
// lines as a block, first exactly, then with trailing whitespace ignored. The
// first place that matches wins. A hunk marked "*** End of File" must match
// at the end of the file. A hunk with no context or removed lines inserts its
// lines after its last anchor, or at the end of the file without one. A file
// that ends without a line break still does; an empty file gets one.
func applyHunks(rel string, data []byte, hunks []Hunk) ([]byte, error) {
	ft := splitFile(data)
	lines := ft.compared()
	type repl struct {
		at, n int
		with  []string
	}
	var repls []repl
	cursor := 0
	for hi := range hunks {
		h := &hunks[hi]
		for _, a := range h.Anchors {
			i := seekAnchor(lines, a, cursor)
			if i < 0 {
				return nil, fmt.Errorf("%w: %s: the @@ line %q of the hunk at patch line %d is not in the file%s; copy a line of the file exactly, or leave the @@ line bare",
					ErrPatchMismatch, rel, a, h.Line, afterLine(cursor))
			}
			cursor = i + 1
		}
		old, added := h.oldLines(), h.newLines()
		if len(old) == 0 {
			at := len(lines)
			if len(h.Anchors) > 0 {
				at = cursor
			}
			for k := range added {
				added[k] += ft.addCR
			}
			repls = append(repls, repl{at: at, with: added})
			continue
		}
		at := -1
		if h.EndOfFile {
			if end := len(lines) - len(old); end >= cursor && (linesEqual(lines[end:], old, false) || linesEqual(lines[end:], old, true)) {
				at = end
			}
		} else {
			at = seekLines(lines, old, cursor)
		}
		if at < 0 {
			return nil, mismatch(rel, h, lines, old, cursor, loneCR(data))
		}
		// Context lines keep the file's text, which may differ from the
		// patch's in trailing whitespace (and, in a mixed file, in its
		// line ending).
		with := make([]string, 0, len(added))
		j := at
		for _, l := range h.Lines {
			switch l.Kind {
			case ' ':
				with = append(with, ft.lines[j])
				j++
			case '-':
				j++
			default:
				with = append(with, l.Text+ft.addCR)
			}
		}
		repls = append(repls, repl{at: at, n: len(old), with: with})
		cursor = at + len(old)
	}
	// Apply from the last so earlier indexes stay right; the cursor only
	// moves forward, so replacements do not overlap. The file's own lines
	// (with their "\r" in a mixed file) are what is joined back.
	lines = ft.lines
	for i := len(repls) - 1; i >= 0; i-- {
		r := repls[i]
		lines = slices.Replace(lines, r.at, r.at+r.n, r.with...)
	}
	final := ft.finalEOL || len(data) == 0
	return []byte(joinLines(lines, ft.eol, final)), nil
}

// afterLine says where a search started, for an error: "" from the top.
func afterLine(cursor int) string {
	if cursor == 0 {
		return ""
	}
	return fmt.Sprintf(" after line %d", cursor)
}

// seekAnchor finds the first line at or after from equal to anchor, exactly
// or ignoring surrounding whitespace; -1 when there is none.
func seekAnchor(lines []string, anchor string, from int) int {
	for i := from; i < len(lines); i++ {
		if lines[i] == anchor {
			return i
		}
	}
	a := strings.TrimSpace(anchor)
	for i := from; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == a {
			return i
		}
	}
	return -1
}

// seekLines finds the first index at or after from where want occurs as a
// block, exactly, else with trailing whitespace ignored; -1 when nowhere.
func seekLines(lines, want []string, from int) int {
	for _, loose := range []bool{false, true} {
		for i := from; i+len(want) <= len(lines); i++ {
			if linesEqual(lines[i:i+len(want)], want, loose) {
				return i
			}
		}
	}
	return -1
}

// linesEqual compares got (at least as long as want) with want line by line,
// ignoring trailing spaces and tabs when loose.
func linesEqual(got, want []string, loose bool) bool {
	for i, w := range want {
		g := got[i]
		if loose {
			g, w = strings.TrimRight(g, " \t"), strings.TrimRight(w, " \t")
		}
		if g != w {
			return false
		}
	}
	return true
}

// loneCR reports whether data has a carriage return that is not part of a
// CRLF: a line break apply_patch does not split at (classic Mac files).
func loneCR(data []byte) bool {
	for i := bytes.IndexByte(data, '\r'); i >= 0; i = bytes.IndexByte(data, '\r') {
		if i+1 >= len(data) || data[i+1] != '\n' {
			return i+1 < len(data) // a final "\r" ends a line, as in a mixed file
		}
		data = data[i+1:]
	}
	return false
}

// mismatch explains a hunk that matched nowhere: the file, the patch line,
// the lines expected, and where the first of them does occur, if anywhere.
// cr says the file has carriage returns that are not line breaks here.
func mismatch(rel string, h *Hunk, lines, old []string, cursor int, cr bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the hunk at patch line %d ", h.Line)
	if h.EndOfFile {
		b.WriteString("(marked *** End of File) does not match the end of the file")
	} else {
		fmt.Fprintf(&b, "does not match the file%s", afterLine(cursor))
	}
	b.WriteString("; expected these lines (context and removed):\n")
	const show = 20
	for i, l := range old {
		if i == show {
			fmt.Fprintf(&b, "  … and %d more\n", len(old)-show)
			break
		}
		b.WriteString("  " + cutText(l) + "\n")
	}
	var at []string
	for i, l := range lines {
		if strings.TrimRight(l, " \t") == strings.TrimRight(old[0], " \t") {
			if len(at) == 5 {
				at = append(at, "…")
				break
			}
			at = append(at, strconv.Itoa(i+1))
		}
	}
	if len(at) > 0 {
		fmt.Fprintf(&b, "The first expected line is at line %s of the file, but the lines after it differ. ", strings.Join(at, ", "))
	} else {
		b.WriteString("The first expected line is not in the file. ")
	}
	if cr {
		b.WriteString("The file's line endings differ from the patch's: it has carriage returns (\\r) not followed by a line feed, which are not line breaks here, so its lines are longer than they look. ")
	}
	b.WriteString("Read the file again and copy the context exactly; no file was changed.")
	return fmt.Errorf("%w: %s: %s", ErrPatchMismatch, rel, b.String())
}
