package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// Limits of the skill tool.
const (
	// SkillFile is the file that makes a directory a skill.
	SkillFile = "SKILL.md"
	// MaxSkillBytes is the largest SKILL.md the tool reads (1 MiB).
	MaxSkillBytes = 1 << 20
	// maxSkillFiles caps the files listed when a skill is loaded.
	maxSkillFiles = 200
	// maxSkillName caps a skill name's length.
	maxSkillName = 64
	// maxFallbackDescription caps a description taken from a body's first
	// line when SKILL.md has no front matter.
	maxFallbackDescription = 200
)

// ErrNoSkillDirs is returned by Skills for an empty list of directories:
// with config skills.dirs empty there is nothing to discover, and the runtime
// should leave the skill tool out of the surface.
var ErrNoSkillDirs = errors.New("tools: skill is unavailable: no skill directories are configured (set skills.dirs)")

// skillArgs are the skill tool's arguments.
type skillArgs struct {
	Name string `json:"name,omitempty" jsonschema:"the skill to load; omit to list the available skills"`
}

// Skills builds the skill tool over dirs (config skills.dirs): read_only,
// safe, parallel_safe. A skill is a directory <dir>/<skill>/ holding a
// SKILL.md that starts with front matter naming it:
//
//	---
//	name: pdf-forms
//	description: Fill in PDF forms with pdftk.
//	---
//	(instructions)
//
// Without front matter the skill is named after its directory and described
// by its first non-empty line. A call without name lists every skill, name
// and description, sorted by name; when two directories hold a skill of the
// same name the first directory in dirs wins and the listing says which is
// shadowed. A call with name returns that skill's instructions (SKILL.md
// after its front matter) and the other files of its directory. Directories
// are read at every call, so skills added later are found.
//
// An absolute dir is used as is; a relative one is resolved against the
// session's workspace (and confined to it, symbolic links included) when the
// call carries one, else against the node's working directory.
//
// A skill that cannot be used (front matter that does not parse, a bad name,
// a SKILL.md over MaxSkillBytes) is left out of the listing and named under
// "Skipped" with the reason, so the operator can see it. A call naming an
// unknown skill fails with the list of available names.
//
// Skills returns ErrNoSkillDirs for an empty dirs, and an error for a blank
// entry. The tool is safe for concurrent use.
func Skills(dirs []string) (*tool.Tool, error) {
	if len(dirs) == 0 {
		return nil, ErrNoSkillDirs
	}
	for i, d := range dirs {
		if strings.TrimSpace(d) == "" || strings.IndexByte(d, 0) >= 0 {
			return nil, fmt.Errorf("tools: skill: dirs[%d] %q is not a directory name", i, d)
		}
	}
	sk := &skillTool{dirs: slices.Clone(dirs)}
	return tool.New("skill",
		"Discover and load skills: reusable instructions for particular tasks, kept by the operator. "+
			"Call with no arguments to list the skills (name and description), then with a name to load one.",
		sk.run,
		tool.WithWorkspaceFree(), tool.WithShortDescription("List skills, or load one by name."),
		tool.WithGuidelines(
			"Call skill with no arguments to see which skills exist when a task may have one (a file format, a release process, a house style).",
			"Load a skill by name before doing the task it describes, and follow its instructions.",
		),
		tool.WithSnippet(`{"name": "pdf-forms"}`),
		tool.WithDeclarations(tool.Declarations{
			Effect:      tool.EffectReadOnly,
			Replay:      tool.ReplaySafe,
			Concurrency: tool.ConcurrencyParallelSafe,
		}),
	)
}

// skillTool is one skill tool's configuration; safe for concurrent use.
type skillTool struct {
	dirs []string
}

// skill is one discovered skill.
type skill struct {
	name, description string
	body              string
	dir               string // absolute path of the skill's directory
	loc               skillLoc
	source            string // the configured dir it was found under
}

// skillIndex is what one scan of the configured directories found.
type skillIndex struct {
	skills   []skill             // first of each name, sorted by name
	shadowed map[string][]string // name -> directories of the skills it hides
	problems []string            // unusable skills and directories, for the listing
}

func (k *skillTool) run(ctx context.Context, a skillArgs) (tool.Result, error) {
	if err := ctx.Err(); err != nil {
		return tool.Result{}, err
	}
	ws, _ := workspace.FromContext(ctx)
	idx := k.scan(ws)
	name := strings.TrimSpace(a.Name)
	if name == "" {
		return tool.Text(idx.list(k.dirs)), nil
	}
	for _, s := range idx.skills {
		if s.name == name {
			return tool.Text(s.render(idx.shadowed[name])), nil
		}
	}
	if len(idx.skills) == 0 {
		return tool.Result{}, fmt.Errorf("skill %q not found: no skills are available (searched %s)", name, strings.Join(k.dirs, ", "))
	}
	names := make([]string, len(idx.skills))
	for i, s := range idx.skills {
		names[i] = s.name
	}
	return tool.Result{}, fmt.Errorf("skill %q not found; available skills: %s", name, strings.Join(names, ", "))
}

// scan reads every configured directory, one level deep. ws is the call's
// workspace, or nil.
func (k *skillTool) scan(ws *workspace.Dir) skillIndex {
	idx := skillIndex{shadowed: map[string][]string{}}
	seen := map[string]bool{}
	for _, dir := range k.dirs {
		loc, err := skillDir(ws, dir)
		if err != nil {
			idx.problems = append(idx.problems, fmt.Sprintf("%s: %v", dir, err))
			continue
		}
		entries, err := fs.ReadDir(loc.fsys, loc.name)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				idx.problems = append(idx.problems, fmt.Sprintf("%s: cannot be read: %v", dir, skillFSError(err)))
			}
			continue
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			s, err := loadSkill(loc.sub(e.Name()), e.Name())
			if errors.Is(err, fs.ErrNotExist) {
				continue // a directory (or file) that is not a skill
			}
			if err != nil {
				idx.problems = append(idx.problems, fmt.Sprintf("%s: %v", filepath.Join(dir, e.Name(), SkillFile), err))
				continue
			}
			s.source = dir
			if seen[s.name] {
				idx.shadowed[s.name] = append(idx.shadowed[s.name], s.dir)
				continue
			}
			seen[s.name] = true
			idx.skills = append(idx.skills, s)
		}
	}
	slices.SortFunc(idx.skills, func(a, b skill) int { return strings.Compare(a.name, b.name) })
	return idx
}

// skillLoc is where a directory of skills, or one skill, is read: name in
// fsys, shown as abs.
type skillLoc struct {
	fsys fs.FS
	name string
	abs  string
}

// sub is the entry e of l.
func (l skillLoc) sub(e string) skillLoc {
	return skillLoc{fsys: l.fsys, name: path.Join(l.name, e), abs: filepath.Join(l.abs, e)}
}

// skillDir returns where a configured directory is read. An absolute dir
// is read as is; a relative one inside the session's workspace (through the
// workspace's os.Root, so a link cannot lead out, and a link swapped in
// while the scan runs cannot either) when the call has one, else relative
// to the node's working directory.
func skillDir(ws *workspace.Dir, dir string) (skillLoc, error) {
	switch {
	case filepath.IsAbs(dir):
		c := filepath.Clean(dir)
		return skillLoc{fsys: os.DirFS(c), name: ".", abs: c}, nil
	case ws != nil:
		rel, err := ws.Rel(dir)
		if err != nil {
			return skillLoc{}, err
		}
		return skillLoc{fsys: ws.Root().FS(), name: filepath.ToSlash(rel), abs: filepath.Join(ws.Path(), rel)}, nil
	}
	abs, err := filepath.Abs(dir)
	return skillLoc{fsys: os.DirFS(abs), name: ".", abs: abs}, err
}

// skillFSError words an error of reading skills: a link that leads out of
// the workspace says so.
func skillFSError(err error) error {
	if workspace.Escaped(err) {
		return errors.New("it leads outside the workspace")
	}
	return unwrapPathError(err)
}

// loadSkill reads and parses SKILL.md in the skill directory l. It returns
// an error matching fs.ErrNotExist when l holds no SKILL.md (or is not a
// directory). Inside a workspace, a SKILL.md that leads outside it is
// refused.
func loadSkill(l skillLoc, dirName string) (skill, error) {
	f, err := l.fsys.Open(path.Join(l.name, SkillFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return skill{}, fs.ErrNotExist
		}
		return skill{}, skillFSError(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return skill{}, fmt.Errorf("%s is not a regular file", SkillFile)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSkillBytes+1))
	if err != nil {
		return skill{}, unwrapPathError(err)
	}
	if len(data) > MaxSkillBytes {
		return skill{}, fmt.Errorf("%s is larger than %d bytes", SkillFile, MaxSkillBytes)
	}
	name, desc, body, err := parseSkill(data, dirName)
	if err != nil {
		return skill{}, err
	}
	return skill{name: name, description: desc, body: body, dir: l.abs, loc: l}, nil
}

// list renders the listing of a scan.
func (idx skillIndex) list(dirs []string) string {
	var b strings.Builder
	if len(idx.skills) == 0 {
		fmt.Fprintf(&b, "No skills found in %s.\n", strings.Join(dirs, ", "))
	} else {
		noun := "skills"
		if len(idx.skills) == 1 {
			noun = "skill"
		}
		fmt.Fprintf(&b, "%d %s (load one with {\"name\": \"...\"}):\n", len(idx.skills), noun)
		for _, s := range idx.skills {
			fmt.Fprintf(&b, "- %s: %s", s.name, oneLine(s.description))
			if hidden := idx.shadowed[s.name]; len(hidden) > 0 {
				fmt.Fprintf(&b, " (from %s; also defined in %s, shadowed: the first directory wins)", s.dir, strings.Join(hidden, ", "))
			}
			b.WriteByte('\n')
		}
	}
	if len(idx.problems) > 0 {
		b.WriteString("\nSkipped (unusable):\n")
		for _, p := range idx.problems {
			fmt.Fprintf(&b, "- %s\n", p)
		}
	}
	return b.String()
}

// render is a loaded skill: header, instructions, and its other files.
func (s skill) render(shadowed []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Skill: %s\nDescription: %s\nDirectory: %s\n", s.name, oneLine(s.description), s.dir)
	if len(shadowed) > 0 {
		fmt.Fprintf(&b, "(shadows the skill of the same name in %s)\n", strings.Join(shadowed, ", "))
	}
	b.WriteString("\n")
	b.WriteString(strings.TrimSpace(s.body))
	b.WriteString("\n")
	files, more := skillFiles(s.loc)
	if len(files) > 0 {
		b.WriteString("\nOther files in this skill (relative to its directory):\n")
		for _, f := range files {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		if more > 0 {
			fmt.Fprintf(&b, "(and %d more)\n", more)
		}
	}
	return b.String()
}

// skillFiles lists the files under the skill directory l but its
// SKILL.md, relative and sorted, skipping hidden entries and not following
// links; at most maxSkillFiles, with how many more there were.
func skillFiles(l skillLoc) (files []string, more int) {
	_ = fs.WalkDir(l.fsys, l.name, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == l.name {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel := strings.TrimPrefix(p, l.name+"/")
		if l.name == "." {
			rel = p
		}
		if rel == SkillFile {
			return nil
		}
		if len(files) >= maxSkillFiles {
			more++
			return nil
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	slices.Sort(files)
	return files, more
}

// parseSkill parses a SKILL.md: its name, description and body (the text
// after the front matter). dirName names a skill without front matter,
// whose description is then its first non-empty line.
//
// Front matter is the YAML-like block between a first line "---" and the
// next line "---" (or "..."). Only two keys are read, both required and
// non-empty: name and description. A value may be plain, "double-quoted",
// 'single-quoted', or a block scalar (| or >) continued on indented lines;
// a plain value may also continue on indented lines. Other keys, and the
// indented lines under them, are ignored; a non-indented line that is not
// "key: value", a comment or blank is an error, as is an unclosed block or
// a repeated name or description. A name is 1..64 letters, digits, '-',
// '_' or '.', not starting with '.'.
func parseSkill(data []byte, dirName string) (name, description, body string, err error) {
	text := string(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = strings.ToValidUTF8(text, "\uFFFD")
	first, rest, _ := strings.Cut(text, "\n")
	if strings.TrimRight(first, " \t") != "---" {
		name = dirName
		for _, line := range strings.Split(text, "\n") {
			if l := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "#")); l != "" {
				description = truncateRunes(l, maxFallbackDescription)
				break
			}
		}
		if err := checkSkillName(name); err != nil {
			return "", "", "", fmt.Errorf("no front matter, and the directory name cannot serve: %w", err)
		}
		if description == "" {
			return "", "", "", errors.New("no front matter and no text to describe the skill; start SKILL.md with ---, name: and description:")
		}
		return name, description, text, nil
	}

	lines := strings.Split(rest, "\n")
	end := -1
	for i, l := range lines {
		if t := strings.TrimRight(l, " \t"); t == "---" || t == "..." {
			end = i
			break
		}
	}
	if end < 0 {
		return "", "", "", errors.New(`front matter opened with "---" on line 1 is not closed; end it with a line "---"`)
	}
	body = strings.Join(lines[end+1:], "\n")

	values := map[string]*strings.Builder{}
	styles := map[string]byte{} // '|' or '>' for block scalars, 'p' for plain, 'q' for quoted
	current := ""
	for i, l := range lines[:end] {
		lineNo := i + 2
		trimmed := strings.TrimSpace(l)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			if current != "" && styles[current] == '|' && trimmed == "" && values[current].Len() > 0 {
				values[current].WriteString("\n")
			}
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			// A continuation: of name or description, or of a key we ignore.
			if current == "" {
				continue
			}
			v := values[current]
			switch styles[current] {
			case '|':
				if v.Len() > 0 {
					v.WriteString("\n")
				}
				v.WriteString(trimmed)
			case 'q':
				return "", "", "", fmt.Errorf("line %d: a quoted %s must be on one line", lineNo, current)
			default:
				if v.Len() > 0 {
					v.WriteString(" ")
				}
				v.WriteString(trimmed)
			}
			continue
		}
		key, val, ok := strings.Cut(l, ":")
		if !ok || strings.TrimSpace(key) == "" || strings.ContainsAny(strings.TrimSpace(key), " \t") {
			return "", "", "", fmt.Errorf("line %d: %q is not a \"key: value\" line", lineNo, truncateRunes(l, 60))
		}
		key = strings.TrimSpace(key)
		if key != "name" && key != "description" {
			current = ""
			continue
		}
		if _, dup := values[key]; dup {
			return "", "", "", fmt.Errorf("line %d: %s is given twice", lineNo, key)
		}
		current = key
		values[key] = &strings.Builder{}
		val = strings.TrimSpace(val)
		switch {
		case val == "|" || val == "|-" || val == "|+":
			styles[key] = '|'
		case val == ">" || val == ">-" || val == ">+":
			styles[key] = '>'
		case strings.HasPrefix(val, `"`):
			s, err := strconv.Unquote(val)
			if err != nil {
				return "", "", "", fmt.Errorf("line %d: %s %s is not a well-formed double-quoted string", lineNo, key, val)
			}
			styles[key] = 'q'
			values[key].WriteString(s)
		case strings.HasPrefix(val, "'"):
			if len(val) < 2 || !strings.HasSuffix(val, "'") {
				return "", "", "", fmt.Errorf("line %d: %s %s is not a well-formed single-quoted string", lineNo, key, val)
			}
			styles[key] = 'q'
			values[key].WriteString(strings.ReplaceAll(val[1:len(val)-1], "''", "'"))
		default:
			if i := strings.Index(val, " #"); i >= 0 {
				val = strings.TrimSpace(val[:i])
			}
			styles[key] = 'p'
			values[key].WriteString(val)
		}
	}
	for _, key := range []string{"name", "description"} {
		if v, ok := values[key]; !ok || strings.TrimSpace(v.String()) == "" {
			return "", "", "", fmt.Errorf("front matter has no %s; give both name: and description:", key)
		}
	}
	name = strings.TrimSpace(values["name"].String())
	description = strings.TrimSpace(values["description"].String())
	if err := checkSkillName(name); err != nil {
		return "", "", "", err
	}
	return name, description, body, nil
}

// checkSkillName refuses a name the model could not pass back cleanly.
func checkSkillName(name string) error {
	if name == "" || len(name) > maxSkillName || name[0] == '.' {
		return fmt.Errorf("name %q is not 1 to %d characters not starting with '.'", truncateRunes(name, 80), maxSkillName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("name %q holds %q; use letters, digits, '-', '_' and '.'", name, r)
		}
	}
	return nil
}

// truncateRunes cuts s to at most n runes, marking the cut.
func truncateRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// unwrapPathError drops the absolute path an fs.PathError repeats.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
