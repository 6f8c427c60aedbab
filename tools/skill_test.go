package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/callsheet/callsheet/tool"
)

// writeFile writes body at path, creating its directories.
func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newSkillTool(t *testing.T, dirs ...string) *tool.Tool {
	t.Helper()
	tl, err := Skills(dirs)
	if err != nil {
		t.Fatalf("Skills: %v", err)
	}
	return tl
}

func TestSkillListAndLoad(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(first, "pdf", "SKILL.md"), "---\nname: pdf-forms\ndescription: Fill in PDF forms.\nlicense: MIT\nmetadata:\n  owner: docs\n---\n# PDF forms\n\nRun scripts/fill.sh.\n")
	writeFile(t, filepath.Join(first, "pdf", "scripts", "fill.sh"), "#!/bin/sh\n")
	writeFile(t, filepath.Join(first, "pdf", "reference.md"), "ref\n")
	writeFile(t, filepath.Join(first, "pdf", ".hidden", "x"), "")
	writeFile(t, filepath.Join(first, "release", "SKILL.md"), "# Cutting a release\n\nTag, then push.\n")
	writeFile(t, filepath.Join(first, "notes.txt"), "not a skill")
	if err := os.Mkdir(filepath.Join(first, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(second, "pdf2", "SKILL.md"), "---\nname: pdf-forms\ndescription: An older PDF skill.\n---\nold\n")
	writeFile(t, filepath.Join(second, "api", "SKILL.md"), "---\nname: \"api-style\"\ndescription: >\n  House style for\n  HTTP APIs.\n---\nUse nouns.\n")
	writeFile(t, filepath.Join(second, "broken", "SKILL.md"), "---\nname: broken\n")

	tl := newSkillTool(t, first, second, filepath.Join(t.TempDir(), "missing"))
	want := tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}
	if tl.Name != "skill" || tl.Declarations != want {
		t.Errorf("tool %q %+v, want skill %+v", tl.Name, tl.Declarations, want)
	}

	r, err := call(t, context.Background(), tl, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	wantList := "3 skills (load one with {\"name\": \"...\"}):\n" +
		"- api-style: House style for HTTP APIs.\n" +
		"- pdf-forms: Fill in PDF forms. (from " + filepath.Join(first, "pdf") + "; also defined in " + filepath.Join(second, "pdf2") + ", shadowed: the first directory wins)\n" +
		"- release: Cutting a release\n" +
		"\nSkipped (unusable):\n" +
		"- " + filepath.Join(second, "broken", "SKILL.md") + `: front matter opened with "---" on line 1 is not closed; end it with a line "---"` + "\n"
	if got := text(t, r); got != wantList {
		t.Errorf("listing=\n%s\nwant\n%s", got, wantList)
	}

	r, err = call(t, context.Background(), tl, `{"name": "pdf-forms"}`)
	if err != nil {
		t.Fatal(err)
	}
	wantLoad := "Skill: pdf-forms\nDescription: Fill in PDF forms.\nDirectory: " + filepath.Join(first, "pdf") + "\n" +
		"(shadows the skill of the same name in " + filepath.Join(second, "pdf2") + ")\n\n" +
		"# PDF forms\n\nRun scripts/fill.sh.\n" +
		"\nOther files in this skill (relative to its directory):\n- reference.md\n- scripts/fill.sh\n"
	if got := text(t, r); got != wantLoad {
		t.Errorf("load=\n%s\nwant\n%s", got, wantLoad)
	}

	r, err = call(t, context.Background(), tl, `{"name": "release"}`)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, text(t, r), "Skill: release\n", "# Cutting a release\n\nTag, then push.\n")
	if strings.Contains(text(t, r), "Other files") {
		t.Errorf("a skill with only SKILL.md lists other files: %q", text(t, r))
	}

	_, err = call(t, context.Background(), tl, `{"name": "nope"}`)
	if err == nil || err.Error() != `skill "nope" not found; available skills: api-style, pdf-forms, release` {
		t.Errorf("unknown: err=%v, want the available names", err)
	}
	_, err = call(t, context.Background(), tl, `{"name": "broken"}`)
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("broken: err=%v, want not found", err)
	}
}

func TestSkillWorkspaceRelativeDir(t *testing.T) {
	e := newEnv(t)
	e.file(t, ".skills/lint/SKILL.md", "---\nname: lint\ndescription: Run the linters.\n---\nmake lint\n")
	// A skill whose SKILL.md leads outside the workspace is refused.
	outside := filepath.Join(e.outside, "SKILL.md")
	writeFile(t, outside, "---\nname: escape\ndescription: x\n---\nsecret\n")
	if err := os.MkdirAll(filepath.Join(e.root, ".skills", "escape"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.root, ".skills", "escape", "SKILL.md")); err != nil {
		t.Fatal(err)
	}
	tl := newSkillTool(t, ".skills")
	r, err := call(t, e.ctx, tl, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	got := text(t, r)
	mustContain(t, got, "1 skill (", "- lint: Run the linters.", "Skipped (unusable):", "escape")
	if strings.Contains(got, "secret") {
		t.Errorf("listing shows a file outside the workspace: %q", got)
	}
	if _, err := call(t, e.ctx, tl, `{"name": "escape"}`); err == nil {
		t.Error("loading a skill outside the workspace succeeded")
	}
}

func TestSkillsConstruction(t *testing.T) {
	if _, err := Skills(nil); !errors.Is(err, ErrNoSkillDirs) {
		t.Errorf("Skills(nil) err=%v, want ErrNoSkillDirs", err)
	}
	if _, err := Skills([]string{"ok", " "}); err == nil {
		t.Error("Skills with a blank dir succeeded")
	}
	tl := newSkillTool(t, filepath.Join(t.TempDir(), "none"))
	r, err := call(t, context.Background(), tl, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, text(t, r), "No skills found in ")
	_, err = call(t, context.Background(), tl, `{"name": "x"}`)
	if err == nil || !strings.Contains(err.Error(), "no skills are available") {
		t.Errorf("err=%v, want no skills are available", err)
	}
}

func TestParseSkill(t *testing.T) {
	tests := []struct {
		name, in, dir            string
		wantName, wantDesc, body string
		wantErr                  string
	}{
		{name: "plain", in: "---\nname: a\ndescription: does a\n---\nbody\n", wantName: "a", wantDesc: "does a", body: "body\n"},
		{name: "crlf and bom", in: "\xef\xbb\xbf---\r\nname: a\r\ndescription: d\r\n---\r\nb\r\n", wantName: "a", wantDesc: "d", body: "b\n"},
		{name: "quoted", in: "---\nname: 'it''s'\ndescription: \"say \\\"hi\\\"\"\n---\n", wantErr: `name "it's" holds '\''`},
		{name: "double quoted", in: "---\nname: \"q\"\ndescription: \"say \\\"hi\\\": now\"\n---\n", wantName: "q", wantDesc: `say "hi": now`},
		{name: "literal block", in: "---\nname: b\ndescription: |\n  line one\n\n  line two\n---\n", wantName: "b", wantDesc: "line one\n\nline two"},
		{name: "folded continuation", in: "---\nname: b\ndescription: starts here\n  and goes on\n---\n", wantName: "b", wantDesc: "starts here and goes on"},
		{name: "comment after value", in: "---\n# a comment\nname: c # the name\ndescription: d\n---\n", wantName: "c", wantDesc: "d"},
		{name: "dots end", in: "---\nname: c\ndescription: d\n...\nafter\n", wantName: "c", wantDesc: "d", body: "after\n"},
		{name: "no front matter", dir: "my-skill", in: "\n\n## Deploy things\nsteps\n", wantName: "my-skill", wantDesc: "Deploy things", body: "\n\n## Deploy things\nsteps\n"},
		{name: "no front matter bad dir", dir: "my skill", in: "text", wantErr: "the directory name cannot serve"},
		{name: "empty file", dir: "d", in: "", wantErr: "no text to describe"},
		{name: "unclosed", in: "---\nname: a\n", wantErr: "is not closed"},
		{name: "missing description", in: "---\nname: a\n---\n", wantErr: "front matter has no description"},
		{name: "empty name", in: "---\nname:\ndescription: d\n---\n", wantErr: "front matter has no name"},
		{name: "duplicate", in: "---\nname: a\nname: b\ndescription: d\n---\n", wantErr: "line 3: name is given twice"},
		{name: "not key value", in: "---\nname: a\njust words\ndescription: d\n---\n", wantErr: `line 3: "just words" is not a "key: value" line`},
		{name: "bad quote", in: "---\nname: \"a\ndescription: d\n---\n", wantErr: "not a well-formed double-quoted string"},
		{name: "name with slash", in: "---\nname: a/b\ndescription: d\n---\n", wantErr: "holds '/'"},
		{name: "dot name", in: "---\nname: .a\ndescription: d\n---\n", wantErr: "not starting with '.'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir
			if dir == "" {
				dir = "dir"
			}
			name, desc, body, err := parseSkill([]byte(tt.in), dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err=%v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err=%v", err)
			}
			if name != tt.wantName || desc != tt.wantDesc || body != tt.body {
				t.Errorf("got (%q, %q, %q), want (%q, %q, %q)", name, desc, body, tt.wantName, tt.wantDesc, tt.body)
			}
		})
	}
}

func FuzzParseSkill(f *testing.F) {
	for _, s := range []string{
		"---\nname: a\ndescription: b\n---\nbody",
		"---\nname: \"a\"\ndescription: |\n  x\n  y\n---\n",
		"---\nname: 'a'\ndescription: >\n  x\n...\n",
		"# Title\ntext",
		"---\n---\n",
		"---\nname: a\n  cont\ndescription: d # c\nother:\n  - x\n---",
		"\xef\xbb\xbf---\r\nname: a\r\n",
	} {
		f.Add([]byte(s), "dir")
	}
	f.Fuzz(func(t *testing.T, data []byte, dir string) {
		name, desc, body, err := parseSkill(data, dir)
		if err != nil {
			if name != "" || desc != "" || body != "" {
				t.Fatalf("error %v with values (%q, %q, %q)", err, name, desc, body)
			}
			return
		}
		if checkSkillName(name) != nil {
			t.Fatalf("accepted invalid name %q", name)
		}
		if strings.TrimSpace(desc) == "" || desc != strings.TrimSpace(desc) {
			t.Fatalf("description %q is empty or untrimmed", desc)
		}
		if !utf8.ValidString(desc) || !utf8.ValidString(body) {
			t.Fatalf("invalid UTF-8 in (%q, %q)", desc, body)
		}
		// Parsing is deterministic.
		n2, d2, b2, err2 := parseSkill(data, dir)
		if n2 != name || d2 != desc || b2 != body || err2 != nil {
			t.Fatal("second parse differs")
		}
	})
}
