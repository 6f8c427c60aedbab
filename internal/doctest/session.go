package doctest

import (
	"fmt"
	"sort"
	"strings"
)

// Session is one shell's steps, in the order the docs give them.
type Session struct {
	Name  string
	Steps []Step
}

// Order sorts Markdown paths as the docs are read: README.md first, then
// docs/ (its pages before its subdirectories'), then the rest.
func Order(files []string) []string {
	rank := func(f string) (int, string) {
		switch {
		case f == "README.md":
			return 0, f
		case strings.HasPrefix(f, "docs/"):
			return 1 + strings.Count(f, "/"), f
		}
		return 9, f
	}
	out := append([]string(nil), files...)
	sort.SliceStable(out, func(i, j int) bool {
		ri, fi := rank(out[i])
		rj, fj := rank(out[j])
		if ri != rj {
			return ri < rj
		}
		return fi < fj
	})
	return out
}

// Sessions gathers the steps of docs (keyed by path) into sessions, in
// Order of the files and then of the lines. A session's steps must follow
// each other: one that starts again after another session began is an
// error, since sessions run one at a time, each stopped (its nodes too)
// before the next starts.
func Sessions(docs map[string]*Doc) ([]Session, error) {
	files := make([]string, 0, len(docs))
	for f := range docs {
		files = append(files, f)
	}
	var out []Session
	where := map[string]string{} // session → where it began
	for _, f := range Order(files) {
		for _, st := range docs[f].Steps {
			if n := len(out); n > 0 && out[n-1].Name == st.Session {
				out[n-1].Steps = append(out[n-1].Steps, st)
				continue
			}
			if began, ok := where[st.Session]; ok {
				return nil, fmt.Errorf("%s:%d: session %q began at %s and another session ran since: a session's steps follow each other (name this one differently, or move it)", st.File, st.Line, st.Session, began)
			}
			where[st.Session] = fmt.Sprintf("%s:%d", st.File, st.Line)
			out = append(out, Session{Name: st.Session, Steps: []Step{st}})
		}
	}
	return out, nil
}
