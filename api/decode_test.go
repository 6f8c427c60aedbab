package api

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/tool"
)

func TestDecodeJSON(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		wantErr    string // "" means success
		wantArgs   string
	}{
		{name: "object arguments", body: `{"calls":[{"id":"a","name":"read","arguments":{"path":"x"}}]}`, wantArgs: `{"path":"x"}`},
		{name: "string arguments", body: `{"calls":[{"id":"a","name":"read","arguments":"{\"path\":\"x\"}"}]}`, wantArgs: `"{\"path\":\"x\"}"`},
		{name: "whitespace after", body: "{\"calls\":[]}\n\t ", wantArgs: ""},
		{name: "two objects", body: `{"calls":[]}{"calls":[]}`, wantErr: "after its JSON object"},
		{name: "garbage after", body: `{"calls":[]} x`, wantErr: "after its JSON object"},
		{name: "number id", body: `{"id": 1}`, wantErr: `field "id" is a JSON number; want a string`},
		{name: "null", body: `null`, wantErr: ""},
		{name: "string", body: `"x"`, wantErr: "send a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req turnRequest
			err := decodeJSON([]byte(tc.body), &req)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err=%v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err=%v, want one saying %q", err, tc.wantErr)
			}
			if tc.wantArgs != "" && string(req.Calls[0].Arguments) != tc.wantArgs {
				t.Fatalf("arguments=%s, want %s passed through verbatim", req.Calls[0].Arguments, tc.wantArgs)
			}
		})
	}
}

// FuzzDecodeTurn: the turn body decoder never panics; what it accepts is
// one valid JSON value whose calls re-encode and decode to the same calls,
// and check either accepts the turn or names the problem.
func FuzzDecodeTurn(f *testing.F) {
	for _, s := range []string{
		`{"id":"t","calls":[{"id":"a","name":"read","arguments":{"path":"x"}}]}`,
		`{"calls":[{"id":"a","name":"read","arguments":"{\"path\":\"x\"}"}]}`,
		`{"calls":[{"id":"","name":""}]}`,
		`{"calls":[]} {}`,
		`{"calls":[{"id":"a","name":"write","arguments":{"path":"x","content":"\u0000"}}],"x":1}`,
		`[`, ``, `null`, `{"calls":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req turnRequest
		if err := decodeJSON(b, &req); err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error message for %q", b)
			}
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		if err := req.check(); err != nil {
			if e, ok := err.(*Error); !ok || e.Status != 400 || e.Message == "" {
				t.Fatalf("check(%q) = %v, want a 400 *Error", b, err)
			}
		}
		re, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("accepted body %q does not re-encode: %v", b, err)
		}
		var again turnRequest
		if err := decodeJSON(re, &again); err != nil {
			t.Fatalf("re-encoded body %s is refused: %v", re, err)
		}
		if len(again.Calls) != len(req.Calls) || again.ID != req.ID {
			t.Fatalf("round trip changed the turn: %+v vs %+v", again, req)
		}
	})
}

func TestDuplicateKeys(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		wantErr    []string // nil: accepted
	}{
		{name: "none", body: `{"id":"t","calls":[{"id":"a","name":"read","arguments":{"path":"x","Path":"y"}}]}`},
		{name: "top level", body: `{"calls":[],"calls":[{"id":"a","name":"shell"}]}`, wantErr: []string{"the body", `"calls" twice`}},
		{name: "in a call", body: `{"calls":[{"id":"a","name":"read","name":"shell"}]}`, wantErr: []string{"calls[0]", `"name" twice`}},
		{name: "second call", body: `{"calls":[{"id":"a","name":"read"},{"id":"b","id":"c","name":"read"}]}`, wantErr: []string{"calls[1]", `"id" twice`}},
		{name: "case", body: `{"calls":[{"id":"a","name":"read","NAME":"shell"}]}`, wantErr: []string{"calls[0]", `"name" and "NAME"`}},
		{name: "long s", body: `{"calls":[{"id":"a","name":"read"}],"callſ":[{"id":"b","name":"shell"}]}`, wantErr: []string{"the body", `"calls" and "callſ"`}},
		{name: "in arguments", body: `{"calls":[{"id":"a","name":"shell","arguments":{"command":"true","command":"rm"}}]}`, wantErr: []string{"calls[0].arguments", `"command" twice`}},
		{name: "deep in arguments", body: `{"calls":[{"id":"a","name":"x","arguments":{"a":[{"b":{"c":1,"c":2}}]}}]}`, wantErr: []string{"calls[0].arguments.a[0].b", `"c" twice`}},
		{name: "in string arguments", body: `{"calls":[{"id":"a","name":"shell","arguments":"{\"command\":\"true\",\"command\":\"rm\"}"}]}`, wantErr: []string{"calls[0].arguments (a string holding JSON)", `"command" twice`}},
		{name: "case in arguments is two keys", body: `{"calls":[{"id":"a","name":"x","arguments":{"env":{"path":"a","PATH":"b"}}}]}`},
		{name: "string arguments not JSON", body: `{"calls":[{"id":"a","name":"x","arguments":"{\"a\":"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req turnRequest
			err := decodeJSON([]byte(tc.body), &req)
			if err == nil {
				err = req.check()
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("err=%v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted, want a refusal")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("err=%q, want one saying %q", err, w)
				}
			}
		})
	}
	// Why: encoding/json takes "callſ" for "calls" and keeps the last.
	var req turnRequest
	_ = json.Unmarshal([]byte(`{"calls":[{"id":"a","name":"read"}],"callſ":[{"id":"b","name":"shell"}]}`), &req)
	if len(req.Calls) != 1 || req.Calls[0].Name != "shell" {
		t.Fatalf("encoding/json decoded %+v; the folding rule above no longer matches it", req.Calls)
	}
}

// countKeys counts the object keys of v as json.Unmarshal gives it (a map
// holds one of each equal key).
func countKeys(v any) int {
	switch x := v.(type) {
	case map[string]any:
		n := len(x)
		for _, e := range x {
			n += countKeys(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range x {
			n += countKeys(e)
		}
		return n
	}
	return 0
}

// FuzzDuplicateKey checks the duplicate-key scanner against a different
// oracle: a document has a repeated key exactly when its token stream holds
// more object keys than json.Unmarshal's maps do.
func FuzzDuplicateKey(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":2}`, `{"a":1,"a":2}`, `[{"a":{"b":1,"b":{}}}]`, `{"a":[1,{"a":1}],"b":{"a":1}}`,
		`{"calls":[{"id":"a","name":"read","name":"shell"}]}`, `"x"`, `[]`, `{"\u0061":1,"a":2}`, `{"\ud800":1,"\ufffd":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			_ = duplicateKey(b, freeFields...) // must not panic
			return
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return
		}
		if nesting(b) > tool.MaxArgumentDepth {
			if err := duplicateKeyAt(b, "", true); err == nil || !strings.Contains(err.Error(), "nests deeper than") {
				t.Fatalf("%.80s: nested %d deep, err=%v, want the bound", b, nesting(b), err)
			}
			return
		}
		keys := keyTokens(b)
		err := duplicateKeyAt(b, "", true)
		if dup := keys > countKeys(v); dup != (err != nil) {
			t.Fatalf("%s: %d keys in the token stream, %d in maps; scanner said %v", b, keys, countKeys(v), err)
		}
	})
}

// keyTokens counts the object keys in a valid JSON document by walking its
// tokens: inside an object, every other token at that level is a key.
func keyTokens(b []byte) int {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	n := 0
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				if _, err := dec.Token(); err != nil { // the key
					return false
				}
				n++
				if !walk() {
					return false
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if !walk() {
					return false
				}
			}
			_, _ = dec.Token()
		}
		return true
	}
	walk()
	return n
}

// nesting is the deepest nesting of objects and arrays in valid JSON.
func nesting(b []byte) int {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// nested is a JSON object nested levels deep, each level one key of keyLen
// bytes.
func nested(levels, keyLen int) string {
	key := strings.Repeat("k", keyLen)
	return strings.Repeat(`{"`+key+`":`, levels-1) + `{}` + strings.Repeat("}", levels-1)
}

// TestArgumentsNestingBound: arguments (as an object or a string holding
// one) and answers may nest tool.MaxArgumentDepth levels; one more is a 400
// that names the bound and where, and nothing else in the body is bounded
// by it.
func TestArgumentsNestingBound(t *testing.T) {
	turn := func(args string) string {
		return `{"calls":[{"id":"a","name":"x","arguments":` + args + `}]}`
	}
	quoted := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	for _, tc := range []struct {
		name, body string
		wantErr    []string
	}{
		{name: "at the bound", body: turn(nested(tool.MaxArgumentDepth, 1))},
		{name: "one level more", body: turn(nested(tool.MaxArgumentDepth+1, 1)), wantErr: []string{"calls[0].arguments nests deeper than 64 levels (at calls[0].arguments.k.k.k…", "tool.MaxArgumentDepth"}},
		{name: "arrays", body: turn(`{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`), wantErr: []string{"calls[0].arguments nests deeper than 64", "arguments.a[0][0]…[0][0]"}},
		{name: "a string at the bound", body: turn(quoted(nested(tool.MaxArgumentDepth, 1)))},
		{name: "a string one level more", body: turn(quoted(nested(tool.MaxArgumentDepth+1, 1))), wantErr: []string{"calls[0].arguments (a string holding JSON) nests deeper than 64"}},
		{name: "2000 deep, long keys", body: turn(nested(2000, 200)), wantErr: []string{"nests deeper than 64", "kkkk…"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req turnRequest
			err := decodeJSON([]byte(tc.body), &req)
			if err == nil {
				err = req.check()
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("err=%v, want none", err)
				}
				return
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("err=%v, want one saying %q", err, w)
				}
			}
			if len(err.Error()) > 2000 {
				t.Fatalf("message of %d bytes, want a short one", len(err.Error()))
			}
		})
	}
	var answer struct {
		Answer json.RawMessage `json:"answer"`
	}
	if err := decodeJSON([]byte(`{"answer":`+nested(tool.MaxArgumentDepth+1, 1)+`}`), &answer); err == nil || !strings.Contains(err.Error(), "answer nests deeper") {
		t.Fatalf("a deep answer: err=%v, want the bound", err)
	}
	var schema struct {
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if err := decodeJSON([]byte(`{"input_schema":`+nested(200, 1)+`}`), &schema); err != nil {
		t.Fatalf("a deep input_schema: %v; its depth is the schema checks' (harness), not this bound", err)
	}
}

// TestDecodeMemoryIsLinear decodes the bodies that took a node to 1.27 GB
// and OOM-killed it (issue 27: objects nested 2,000 deep with 200-byte keys,
// 0.4 MiB; 9,900 deep with 790-byte keys, 7.5 MiB) in a free field that has
// no nesting bound (a harness tool's input_schema), counting the bytes
// decoding allocates: a scanner that builds a path string per level and
// keeps them all allocates about depth² × key / 2.
func TestDecodeMemoryIsLinear(t *testing.T) {
	for _, tc := range []struct{ levels, key int }{{2000, 200}, {9900, 790}} {
		body := []byte(`{"input_schema":` + nested(tc.levels, tc.key) + `}`)
		var v struct {
			InputSchema json.RawMessage `json:"input_schema"`
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if err := decodeJSON(body, &v); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("%d levels, %d-byte keys: a %d-byte body, %d bytes allocated (%.1f× the body)", tc.levels, tc.key, len(body), allocated, float64(allocated)/float64(len(body)))
		if allocated > 40*uint64(len(body)) {
			t.Fatalf("decoding allocated %d bytes for a %d-byte body, want at most 40× the body", allocated, len(body))
		}
	}
}

// FuzzQuickKeys: whatever quickKeysOK clears, the full scan clears too, for
// a body (with the API's and the native formats' free fields) and for a
// free value as a whole document; and it clears a plain body.
func FuzzQuickKeys(f *testing.F) {
	deep := strings.Repeat("[", tool.MaxArgumentDepth) + strings.Repeat("]", tool.MaxArgumentDepth)
	for _, s := range []string{
		completeNextBody, `{"a":1,"A":2}`, `{"arguments":{"a":1,"A":2}}`, `{"a":{"b":1},"b":{"a":1}}`,
		`{"a\"b":1,"a\"b":2}`, `{"\u0061":1,"a":2}`, `{"ſ":1,"S":2}`, `{"K":1,"k":2}`, deep, "[" + deep + "]",
		`{"arguments":` + deep + `}`, `{"a":"}","a":1}`, `{"a":[{"b":1},{"b":2}]}`, `{"a":1`, `}{`, `"\\"`, ``,
	} {
		f.Add([]byte(s))
	}
	if !quickKeysOK([]byte(completeNextBody)) {
		f.Fatalf("quickKeysOK refuses a worker's plain complete: %s", completeNextBody)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !quickKeysOK(b) {
			return
		}
		for _, c := range []struct {
			free  []string
			whole bool
		}{{freeFields, false}, {nativeFree, false}, {nil, true}, {nil, false}} {
			if err := scanKeys(b, "", c.free, c.whole); err != nil {
				t.Fatalf("%.200q: quickKeysOK cleared it, the scan says %v", b, err)
			}
		}
	})
}
