package tools

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDecodeRgJSON feeds arbitrary streams to the rg --json decoder: it never
// panics, keeps within its caps, and returns lines in path then line order.
func FuzzDecodeRgJSON(f *testing.F) {
	seeds := []string{
		`{"type":"begin","data":{"path":{"text":"a.go"}}}
{"type":"context","data":{"path":{"text":"a.go"},"lines":{"text":"x1\n"},"line_number":1,"absolute_offset":0,"submatches":[]}}
{"type":"match","data":{"path":{"text":"a.go"},"lines":{"text":"foo\n"},"line_number":2,"absolute_offset":3,"submatches":[{"match":{"text":"foo"},"start":0,"end":3}]}}
{"type":"end","data":{"path":{"text":"a.go"},"binary_offset":null,"stats":{}}}
{"type":"summary","data":{"elapsed_total":{"secs":0,"nanos":1,"human":"0s"},"stats":{}}}
`,
		`{"type":"match","data":{"path":{"bytes":"YmFk/i50eHQ="},"lines":{"bytes":"Zm9v/wo="},"line_number":1}}`,
		`{"type":"match","data":{"path":{"bytes":"!!"},"lines":{"text":"x"},"line_number":1}}`,
		`{"type":"context","data":{"path":{"text":"b"},"lines":{"text":"x"}}}`,
		`{"type":"match","data":{"path":{"text":"b"},"lines":{"text":"x"},"line_number":-4}}`,
		`{"type":"future","data":{}}`,
		"not json\n",
		// A decode error after lines out of order: what was read is
		// still returned sorted. encoding/json matches keys regardless
		// of case.
		"{\"tYpe\":\"context\",\"dAtA\":{\"pAth\":{\"teXt\":\"00\"},\"lines\":{\"teXt\":\"\"},\"line_numBer\":1}}\n{\"tYpe\":\"match\",\"dAtA\":{\"pAth\":{\"teXt\":\"0\"},\"lines\":{\"teXt\":\"\"},\"line_numBer\":1}}\n0",
		"\n\n{}\n",
		strings.Repeat("x", 300) + "\n" + `{"type":"match","data":{"path":{"text":"z"},"lines":{"text":"x\r\n"},"line_number":9}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), 3, 1)
	}
	f.Fuzz(func(t *testing.T, data []byte, matches, ctxLines int) {
		matches = 1 + fuzzAbs(matches)%50
		ctxLines = fuzzAbs(ctxLines) % (MaxGrepContext + 1)
		lim := grepLimits{matches: matches, context: ctxLines, bytes: 4096, maxLine: 256}
		hits, _, _ := decodeRgStream(bytes.NewReader(data), lim)
		if hits.matches > matches {
			t.Fatalf("matches=%d, cap %d", hits.matches, matches)
		}
		n := 0
		held := 0
		for i, l := range hits.lines {
			if l.Match {
				n++
			}
			held += len(l.Text) + len(l.Path)
			if l.Line < 1 {
				t.Fatalf("line %d has number %d", i, l.Line)
			}
			if i > 0 {
				p := hits.lines[i-1]
				if c := comparePaths(p.Path, l.Path); c > 0 || c == 0 && p.Line > l.Line {
					t.Fatalf("lines out of order: %+v before %+v", p, l)
				}
			}
		}
		if n != hits.matches {
			t.Fatalf("counted %d matches, hits says %d", n, hits.matches)
		}
		// Base64 can only shrink what was read, so what is held is bounded
		// by the bytes read.
		if held > int(lim.bytes) {
			t.Fatalf("held %d bytes of text from a %d-byte budget", held, lim.bytes)
		}
		out := formatGrep(hits.lines, "dir", ctxLines)
		if strings.Count(out, "\n") < len(hits.lines) {
			t.Fatalf("formatted %d lines as %q", len(hits.lines), out)
		}

		// One message alone: the decoder agrees with encoding/json about
		// what is JSON.
		if l, ok, err := decodeRgMessage(data); err == nil && ok {
			if !json.Valid(data) || l.Line < 1 {
				t.Fatalf("decoded %+v from %q", l, data)
			}
		}
	})
}

// FuzzGlobPaths feeds arbitrary rg --files output to the path decoder.
func FuzzGlobPaths(f *testing.F) {
	f.Add([]byte("a/b.go\na-c/z.go\n.hid/h.go\n"), 2)
	f.Add([]byte("x\xff\n\n\nlast"), 10)
	f.Add([]byte(strings.Repeat("p", 5000)+"\nq\n"), 1)
	f.Fuzz(func(t *testing.T, data []byte, limit int) {
		limit = 1 + fuzzAbs(limit)%20
		paths, cut, stop := decodeGlobPaths(bytes.NewReader(data), "d", limit, 2048)
		if len(paths) > limit {
			t.Fatalf("%d paths, limit %d", len(paths), limit)
		}
		if stop && !strings.Contains(cut, "stopped") {
			t.Fatalf("stop=%v with cut %q", stop, cut)
		}
		for i, p := range paths {
			if !strings.HasPrefix(p, "d/") {
				t.Fatalf("path %q lacks the directory", p)
			}
			if i > 0 && comparePaths(paths[i-1], p) > 0 {
				t.Fatalf("paths out of order: %q before %q", paths[i-1], p)
			}
		}
	})
}

// FuzzGrepArgs runs arbitrary arguments through grep's validator and the
// rg flag builder: no panic, and the pattern always reaches rg as one
// --regexp= flag, never as a flag of its own.
func FuzzGrepArgs(f *testing.F) {
	f.Add(`{"pattern": "foo", "glob": "*.go", "context": 2}`)
	f.Add(`{"pattern": "--pre=sh", "path": "-x", "literal": true}`)
	f.Add(`"{\"pattern\": \"x\"}"`)
	f.Add(`{"pattern": 1}`)
	grep, err := newGrep("/nonexistent/rg", searchOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args string) {
		if grep.Validate(json.RawMessage(args)) != nil {
			return
		}
		_ = grep.TouchedPaths(json.RawMessage(args))
		var a grepArgs
		if json.Unmarshal([]byte(args), &a) != nil {
			return // a string holding the object: validated, not decoded here
		}
		flags := grepRgArgs(a, a.Context, "", []string{"--", "f"})
		want := "--regexp=" + a.Pattern
		found := false
		for _, fl := range flags {
			if fl == want {
				found = true
			}
		}
		if !found {
			t.Fatalf("flags %q lack %q", flags, want)
		}
	})
}

// FuzzGlobArgs runs arbitrary arguments through glob's validator: no panic,
// and what validates decodes with the limit in range.
func FuzzGlobArgs(f *testing.F) {
	f.Add(`{"pattern": "**/*.go", "path": "src", "limit": 10}`)
	f.Add(`{"pattern": "*", "limit": 10001}`)
	f.Add(`{"pattern": "*", "hidden": true}`)
	f.Add(`"{\"pattern\": \"x\"}"`)
	glob, err := newGlob("/nonexistent/rg", searchOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args string) {
		if glob.Validate(json.RawMessage(args)) != nil {
			return
		}
		var a globArgs
		if json.Unmarshal([]byte(args), &a) != nil {
			return
		}
		if a.Limit < 0 || a.Limit > MaxGlobLimit {
			t.Fatalf("limit %d validated", a.Limit)
		}
	})
}

func fuzzAbs(n int) int {
	if n < 0 {
		if n == -n { // the most negative int
			return 0
		}
		return -n
	}
	return n
}
