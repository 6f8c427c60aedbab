package replay

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"flag"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

var update = flag.Bool("update", false, "rewrite testdata/*.timeline.html and *.md from the golden event streams")

// Hostile model output: each tries to leave the text it is written into.
var hostile = []string{
	`</script><script>document.title='pwned'</script>`,
	`<img src=x onerror="document.title='pwned'">`,
	`"><svg onload="document.title='pwned'">`,
	`</title></text></svg><iframe src="https://evil.example/"></iframe>`,
	`</template><i data-cs-done></i><template data-cs-swap="cs-head"><h1>forged</h1></template><i data-cs-done></i>`,
	`<style>body{background:url(https://evil.example/x.png)}</style>`,
}

func hostileAudit() projections.Audit {
	a := markdownAudit()
	c := &a.Turns[0].Calls[0]
	c.ID = hostile[2]
	c.Name = hostile[3]
	c.Arguments = mustJSON(map[string]string{"path": hostile[1]})
	c.Attempts[0].Error = hostile[0]
	c.Result.Content = nil
	for _, h := range hostile {
		c.Result.Content = append(c.Result.Content, events.Part{Type: "text", Text: h})
	}
	c.Result.Content = append(c.Result.Content, events.Part{Type: "json", JSON: mustJSON(map[string]string{"x": hostile[0]})})
	a.Turns[0].Calls[2].Approval.By = hostile[1]
	a.Turns[0].Turn = hostile[4]
	a.Turns[1].Notices[0].Text = hostile[5]
	a.Turns[0].Marks = []projections.Mark{{Stamp: at(21, 30), Type: events.Type(hostile[0]), Problem: projections.MarkUnknown, Data: mustJSON(hostile[1])}}
	return a
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

var (
	scriptRE = regexp.MustCompile(`(?s)<script>(.*?)</script>`)
	styleRE  = regexp.MustCompile(`(?s)<style>(.*?)</style>`)
	metaRE   = regexp.MustCompile(`<meta http-equiv="Content-Security-Policy" content="([^"]*)">`)
)

// checkSelfContained checks the promises of docs/audit.md about a page: one
// script and one style sheet, both ours and both named by hash in the
// page's policy, which allows nothing else; nothing that would load
// anything from anywhere.
func checkSelfContained(t *testing.T, page string) {
	t.Helper()
	scripts := scriptRE.FindAllStringSubmatch(page, -1)
	styles := styleRE.FindAllStringSubmatch(page, -1)
	if n := strings.Count(strings.ToLower(page), "<script"); n != 1 || len(scripts) != 1 || scripts[0][1] != timelineJS {
		t.Fatalf("the page has %d <script (%d whole), want exactly the page's own", n, len(scripts))
	}
	if n := strings.Count(strings.ToLower(page), "<style"); n != 1 || len(styles) != 1 || styles[0][1] != timelineCSS {
		t.Fatalf("the page has %d <style, want exactly the page's own", n)
	}
	m := metaRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no Content-Security-Policy meta element")
	}
	policy := html.UnescapeString(m[1])
	sum := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(h[:]) + "'"
	}
	for _, want := range []string{"default-src 'none'", "script-src " + sum(scripts[0][1]), "style-src " + sum(styles[0][1]), "base-uri 'none'", "form-action 'none'"} {
		if !strings.Contains(policy, want) {
			t.Errorf("policy %q lacks %q", policy, want)
		}
	}
	if strings.Contains(policy, "unsafe") || strings.Contains(policy, "http") || strings.Contains(policy, "*") {
		t.Errorf("policy %q allows more than the page's own script and style", policy)
	}
	if TimelinePolicy() != policy+"; frame-ancestors 'none'" {
		t.Errorf("TimelinePolicy()=%q, want the meta policy plus frame-ancestors", TimelinePolicy())
	}
	for _, own := range []string{timelineCSS, timelineJS} {
		if strings.Contains(own, "url(") || strings.Contains(own, "@import") || strings.Contains(own, "http") || strings.Contains(own, "fetch(") || strings.Contains(own, "XMLHttpRequest") {
			t.Fatal("the page's own style or script names something to load")
		}
	}
	checkMarkup(t, page)
}

var (
	tagRE  = regexp.MustCompile(`<[^>]*>`)
	attrRE = regexp.MustCompile(`\s([^\s="'>/]+)(?:="[^"]*")?`)
	// The elements and attributes the page's template writes; none loads
	// anything.
	pageTags  = "!doctype html head meta title style body header h1 h2 h4 code p dl dt dd section svg g line text rect path main script span ul li div details summary pre template i"
	pageAttrs = "lang charset http-equiv content name id class aria-label viewbox width height role x y x1 y1 x2 y2 dy d data-cs-call data-cs-swap data-cs-done tabindex html"
)

// checkMarkup checks every tag of a page (its style and script bodies
// aside) against the elements and attributes the template writes: text
// from the log, if it were not escaped, would show up here as a tag or an
// attribute of its own.
func checkMarkup(t *testing.T, page string) {
	t.Helper()
	page = scriptRE.ReplaceAllString(page, "<script></script>")
	page = styleRE.ReplaceAllString(page, "<style></style>")
	tags := strings.Fields(pageTags)
	attrs := strings.Fields(pageAttrs)
	for _, tag := range tagRE.FindAllString(page, -1) {
		name := strings.ToLower(strings.TrimLeft(strings.Fields(strings.Trim(tag, "<>/"))[0], "/"))
		if !slices.Contains(tags, name) {
			t.Errorf("the page has a <%s> element: %q", name, tag)
		}
		if strings.Contains(tag, "http:") || strings.Contains(tag, "https:") || strings.Contains(tag, `="//`) {
			t.Errorf("a tag names a URL: %q", tag)
		}
		if name == "!doctype" {
			continue
		}
		for _, m := range attrRE.FindAllStringSubmatch(strings.TrimPrefix(tag, "<"+name), -1) {
			if a := strings.ToLower(m[1]); !slices.Contains(attrs, a) {
				t.Errorf("the page has a %s attribute: %q", a, tag)
			}
		}
	}
}

func TestTimelineHoldsEveryFact(t *testing.T) {
	page := string(Timeline(markdownAudit()))
	checkSelfContained(t, page)
	for _, want := range []string{
		"<!DOCTYPE html>", `id="cs-head"`, "Session <code>S1</code>", "as of event 20",
		// each call, its outcome, its lane and its details
		`data-cs-call="cs-c-0-0"`, `data-cs-call="cs-c-0-1"`, `data-cs-call="cs-c-0-2"`, `data-cs-call="cs-c-1-0"`,
		`id="cs-c-0-0"`, "1. read <code>a</code>", "2. write <code>b</code>", "3. grep <code>c</code>",
		`<span class="badge ok">ok</span>`, `<span class="badge blocked">blocked</span>`, `<span class="badge running">waiting</span>`,
		// the retry's attempt numbers, on the lane and in the details
		`class="attempt">#1</text>`, `class="attempt">#2</text>`, "attempts #1 error, #2 ok", "<dt>Attempt 2</dt>", "<dt>Retry</dt><dd>attempt 2 scheduled",
		`class="retry"`,
		// the approval's decider and when
		"allowed by alice at 09:00:02.000", "allowed by alice at 2026-12-01 09:00:02.000 UTC", `class="mk allow"`,
		// the blocked call's category
		"blocked: invalid_arguments", `class="blocked"`,
		// marks: requested, claimed (with its node), ended, committed
		`class="mk req"`, `class="mk claim"`, "claimed by N2", `class="mk commit"`, `class="end"`,
		// truncation and the notice
		"truncated: full output 90000 bytes, 3000 lines", `class="mk trunc"`, "retry notice: call b (write, turn t1, attempt 1)",
		// arguments and results, for hover and click
		"<title>1. read a: ok\narguments: {&#34;path&#34;:&#34;x&#34;}\nresult: has ``` inside", "<h4>Arguments</h4>", "<h4>Result</h4>", "has ``` inside",
		"</body>\n</html>\n",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// TestTimelineEscapesHostileOutput renders arguments, results, ids, names,
// deciders, notices and event types that try to break out of their
// element: none may become markup.
func TestTimelineEscapesHostileOutput(t *testing.T) {
	page := string(Timeline(hostileAudit()))
	checkSelfContained(t, page)
	page = scriptRE.ReplaceAllString(page, "<script></script>")
	for _, bad := range []string{"<svg onload", "</template><i data-cs-done>", "<h1>forged", "<i data-cs-done", "<template"} {
		if strings.Contains(page, bad) {
			i := strings.Index(page, bad)
			t.Errorf("hostile %q came through: %q", bad, page[max(0, i-60):min(len(page), i+60)])
		}
	}
	// They are there, as text.
	for _, want := range []string{"&lt;/script&gt;&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;", "&lt;img src=x onerror=&#34;document.title=&#39;pwned&#39;&#34;&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks the escaped text %q", want)
		}
	}
	// The same in a live update, whose templates must be the only ones.
	up := string(TimelineUpdate(hostileAudit(), []int{0, 1}))
	if n := strings.Count(up, "<template"); n != 3 {
		t.Errorf("a live update of the head and two turns holds %d <template, want 3", n)
	}
	if n := strings.Count(up, "<i data-cs-done></i>"); n != 3 {
		t.Errorf("a live update holds %d markers, want 3", n)
	}
	if strings.Contains(strings.ToLower(up), "<script") {
		t.Error("a live update holds a script")
	}
}

// TestTimelineLiveIsTheSamePage: the live page (start, updates, end) brings
// every element to exactly what the complete page holds.
func TestTimelineLiveIsTheSamePage(t *testing.T) {
	for base, evs := range goldenStreams(t) {
		final := projections.FoldAudit(evs[0].Tenant, evs[0].Session, evs)
		page := string(Timeline(final))
		f := projections.NewAuditFolder(evs[0].Tenant, evs[0].Session)
		f.Apply(evs[0])
		var live bytes.Buffer
		live.Write(TimelineStart(f.Audit()))
		f.Changes()
		latest := map[string]string{}
		for _, ev := range evs[1:] {
			f.Apply(ev)
			up := string(TimelineUpdate(f.Audit(), f.Changes()))
			live.WriteString(up)
			for _, m := range swapRE.FindAllStringSubmatch(up, -1) {
				latest[m[1]] = m[2]
			}
		}
		live.Write(TimelineEnd(f.Audit()))
		end := swapRE.FindAllStringSubmatch(string(TimelineEnd(f.Audit())), -1)
		latest[end[0][1]] = end[0][2]
		if !strings.HasPrefix(live.String(), string(TimelineStart(projections.FoldAudit(evs[0].Tenant, evs[0].Session, evs[:1])))) {
			t.Errorf("%s: the live page does not start as the page of its first event", base)
		}
		for i := range final.Turns {
			id := turnID(i)
			want := sectionRE(id).FindString(page)
			if want == "" || latest[id] != want {
				t.Errorf("%s: the last update of %s:\n%s\nwant the complete page's:\n%s", base, id, latest[id], want)
			}
		}
		if want := headRE.FindString(page); latest["cs-head"] != want {
			t.Errorf("%s: the live page's final head:\n%s\nwant:\n%s", base, latest["cs-head"], want)
		}
		if !strings.HasSuffix(live.String(), "</body>\n</html>\n") {
			t.Errorf("%s: the live page does not end", base)
		}
	}
}

var (
	swapRE = regexp.MustCompile(`(?s)<template data-cs-swap="([^"]+)">(.*?)</template><i data-cs-done></i>`)
	headRE = regexp.MustCompile(`(?s)<header id="cs-head">.*?</header>`)
)

func sectionRE(id string) *regexp.Regexp {
	return regexp.MustCompile(`(?s)<section class="turn" id="` + id + `">.*?</section>`)
}

func goldenStreams(t *testing.T) map[string][]events.Event {
	t.Helper()
	paths, _ := filepath.Glob("../projections/testdata/*.events.jsonl")
	if len(paths) == 0 {
		t.Fatal("no golden streams in ../projections/testdata")
	}
	out := map[string][]events.Event{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var evs []events.Event
		for sc.Scan() {
			ev, err := events.Unmarshal(sc.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
		f.Close()
		out[strings.TrimSuffix(filepath.Base(p), ".events.jsonl")] = evs
	}
	return out
}

// TestGoldenPages renders the page and the Markdown of each golden stream
// (recorded by real nodes) and compares them with testdata; -update rewrites
// them. Open testdata/*.timeline.html in a browser to look at one.
func TestGoldenPages(t *testing.T) {
	for name, evs := range goldenStreams(t) {
		a := projections.FoldAudit(evs[0].Tenant, evs[0].Session, evs)
		for _, out := range []struct {
			file string
			got  []byte
		}{
			{name + ".timeline.html", Timeline(a)},
			{name + ".md", Markdown(a)},
		} {
			path := filepath.Join("testdata", out.file)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, out.got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./replay -run TestGoldenPages -update)", err)
			}
			if !bytes.Equal(out.got, want) {
				t.Errorf("%s differs from the golden file (rerun with -update after checking the change)", path)
			}
		}
		checkSelfContained(t, string(Timeline(a)))
	}
}

// TestMarkdownAndPageSayTheSame: every fact line of every call is in both,
// in the same words.
func TestMarkdownAndPageSayTheSame(t *testing.T) {
	for name, evs := range goldenStreams(t) {
		a := projections.FoldAudit(evs[0].Tenant, evs[0].Session, evs)
		md, page := string(Markdown(a)), html.UnescapeString(string(Timeline(a)))
		for i := range a.Turns {
			for j := range a.Turns[i].Calls {
				for _, f := range callFacts(&a.Turns[i], &a.Turns[i].Calls[j]) {
					if !strings.Contains(md, "- "+f.Label+": "+mdText(f.Text)) {
						t.Errorf("%s: the Markdown lacks %s: %s", name, f.Label, f.Text)
					}
					if !strings.Contains(page, "<dt>"+f.Label+"</dt><dd>"+f.Text+"</dd>") {
						t.Errorf("%s: the page lacks %s: %s", name, f.Label, f.Text)
					}
				}
			}
		}
	}
}

// FuzzTimeline puts arbitrary text where model output goes: the page must
// stay self-contained, with no markup but its own.
func FuzzTimeline(f *testing.F) {
	for _, h := range hostile {
		f.Add(h, h, h)
	}
	f.Add("ok", "a", "read")
	f.Fuzz(func(t *testing.T, text, id, name string) {
		a := markdownAudit()
		c := &a.Turns[0].Calls[0]
		c.ID, c.Name = id, name
		c.Result.Content = []events.Part{{Type: "text", Text: text}}
		c.Attempts[0].Error = text
		c.Arguments = mustJSON(map[string]string{text: id})
		page := string(Timeline(a))
		checkSelfContained(t, page)
		page = scriptRE.ReplaceAllString(page, "<script></script>")
		if strings.Contains(page, "<template") || strings.Contains(page, "<i data-cs-done") {
			t.Fatalf("model text became a live update")
		}
	})
}
