package doctest

import (
	"strings"
	"testing"
	"time"
)

func TestParseRunBlockWithOutputs(t *testing.T) {
	src := "# T\n\n" +
		"<!-- doctest: setup s1\nmake run &\nsleep 1\n-->\n\n" +
		"<!-- doctest: run s1 status=1 timeout=90s -->\n" +
		"```sh\n" +
		"# prose before the first command\n" +
		"B=http://127.0.0.1:7700   # a trailing comment is prose\n" +
		"curl -s $B/healthz\n" +
		"# {\"status\":\"ok\"}\n" +
		"\n" +
		"# prose after a blank line\n" +
		"curl -s -X POST $B/v1/sessions -d '{\n" +
		"# not a comment: inside the quotes\n" +
		"}'\n" +
		"```\n" +
		"```json\n" +
		"{\"session\": \"…\"}\n" +
		"```\n"
	d, probs := Parse("x.md", []byte(src))
	if len(probs) > 0 {
		t.Fatalf("problems: %v", probs)
	}
	if len(d.Steps) != 2 || !d.Steps[0].Setup || d.Steps[1].Setup {
		t.Fatalf("steps = %+v, want a setup then a run", d.Steps)
	}
	if got := d.Steps[0].Segments[0].Script; got != "make run &\nsleep 1\n" {
		t.Fatalf("setup script = %q", got)
	}
	run := d.Steps[1]
	if run.Status != 1 || run.Timeout != 90*time.Second || run.Session != "s1" || run.Line != 8 {
		t.Fatalf("run = %+v", run)
	}
	if len(run.Segments) != 2 {
		t.Fatalf("segments = %+v, want 2", run.Segments)
	}
	first, last := run.Segments[0], run.Segments[1]
	if first.Expect != `{"status":"ok"}` || first.ExpectLine != 13 || first.Line != 10 || !strings.HasSuffix(first.Script, "curl -s $B/healthz") {
		t.Fatalf("first segment = %+v", first)
	}
	if !strings.Contains(last.Script, "# not a comment: inside the quotes") || last.Expect != "{\"session\": \"…\"}\n" || !last.JSON || last.ExpectLine != 21 {
		t.Fatalf("last segment = %+v", last)
	}
}

func TestParseProblems(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unmarked shell block", "```sh\nls\n```\n", "without a directive"},
		{"unmarked bash block", "text\n\n```bash\nls\n```\n", "without a directive"},
		{"no info string", "```\nls\n```\n", "without an info string"},
		{"prompt in text", "```text\n$ ls\n```\n", `shows a "$ " prompt`},
		{"directive not adjacent", "<!-- doctest: run s -->\n\n```sh\nls\n```\n", "line right above"},
		{"skip without reason", "<!-- doctest: skip -->\n```sh\nls\n```\n", "says why"},
		{"run without session", "<!-- doctest: run -->\n```sh\nls\n```\n", "names its session"},
		{"unknown option", "<!-- doctest: run s fast -->\n```sh\nls\n```\n", "unknown option"},
		{"bad status", "<!-- doctest: run s status=x -->\n```sh\nls\n```\n", "status="},
		{"unknown verb", "<!-- doctest: walk s -->\n```sh\nls\n```\n", "want run SESSION"},
		{"run on json", "<!-- doctest: run s -->\n```json\n{}\n```\n", "not ```json"},
		{"open quote", "<!-- doctest: run s -->\n```sh\necho 'a\n```\n", "ends inside a quoted string"},
		{"setup above a block", "<!-- doctest: setup s\nls\n-->\n```sh\nls\n```\n", "must not sit right above"},
		{"empty setup", "<!-- doctest: setup s\n-->\n", "holds its commands"},
		{"output twice", "<!-- doctest: run s -->\n```sh\nls\n# a\n```\n```text\na\n```\n", "already give"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, probs := Parse("x.md", []byte(tc.src))
			var all []string
			for _, p := range probs {
				all = append(all, p.Error())
			}
			if !strings.Contains(strings.Join(all, "\n"), tc.want) {
				t.Fatalf("problems = %q, want one saying %q", all, tc.want)
			}
		})
	}
}

func TestParseSkipsAndPlainBlocks(t *testing.T) {
	src := "<!-- doctest: skip needs a cluster -->\n```sh\nnats stream ls\n```\n\n```json\n{}\n```\n\n<!-- a plain comment -->\n```text\nout\n```\n"
	d, probs := Parse("x.md", []byte(src))
	if len(probs) > 0 || len(d.Steps) != 0 || len(d.Skips) != 1 || d.Skips[0].Reason != "needs a cluster" || d.Blocks != 1 {
		t.Fatalf("doc = %+v, problems %v", d, probs)
	}
}

func TestSessionsMustFollowEachOther(t *testing.T) {
	docs := map[string]*Doc{
		"README.md":     {Steps: []Step{{File: "README.md", Line: 1, Session: "a"}}},
		"docs/api.md":   {Steps: []Step{{File: "docs/api.md", Line: 1, Session: "b"}}},
		"docs/zebra.md": {Steps: []Step{{File: "docs/zebra.md", Line: 1, Session: "a"}}},
	}
	if _, err := Sessions(docs); err == nil || !strings.Contains(err.Error(), `session "a" began at README.md:1`) {
		t.Fatalf("Sessions = %v, want a's second start refused", err)
	}
	docs["docs/zebra.md"].Steps[0].Session = "c"
	ss, err := Sessions(docs)
	if err != nil || len(ss) != 3 || ss[0].Name != "a" || ss[1].Name != "b" || ss[2].Name != "c" {
		t.Fatalf("Sessions = %+v, %v", ss, err)
	}
}

func TestOrder(t *testing.T) {
	got := Order([]string{"client/README.md", "docs/tools/read.md", "docs/api.md", "README.md", "CHANGELOG.md", "docs/operations.md"})
	want := "README.md docs/api.md docs/operations.md docs/tools/read.md CHANGELOG.md client/README.md"
	if strings.Join(got, " ") != want {
		t.Fatalf("Order = %v, want %s", got, want)
	}
}

// FuzzParse: any Markdown parses without a panic, and every step and skip
// it finds lies within the file.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"<!-- doctest: run s -->\n```sh\necho hi\n# hi\n```\n```text\nhi\n```\n",
		"<!-- doctest: setup s\nls\n-->\n",
		"<!-- doctest: skip why -->\n~~~sh\nls\n~~~\n",
		"- item\n\n  <!-- doctest: run s -->\n  ```sh\n  ls\n  ```\n",
		"```\n```\n<!--",
		"<!-- doctest: run s -->\n```sh\necho \"a\\\"b\" \\\n  'c'\n# c\n```\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		d, probs := Parse("f.md", []byte(src))
		lines := strings.Count(src, "\n") + 1
		for _, p := range probs {
			if p.Line < 1 || p.Line > lines+1 {
				t.Fatalf("problem at line %d of %d: %v", p.Line, lines, p)
			}
		}
		for _, st := range d.Steps {
			if st.Line < 1 || st.Line > lines || len(st.Segments) == 0 {
				t.Fatalf("step %+v in %d lines", st, lines)
			}
		}
	})
}
