package jsonread

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// readAll reads data to its end with fold applied to every object, and
// returns the first error (nil at a clean end).
func readAll(data []byte, fold bool, opts ...Option) error {
	r := New(data, opts...)
	for {
		tok, err := r.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if fold && tok == json.Delim('{') {
			r.Fold()
		}
	}
}

func TestDuplicateKeys(t *testing.T) {
	tests := []struct {
		name   string
		doc    string
		fold   bool
		object string // "" and key "": accepted
		key    string
		prev   string
		offset int64
	}{
		{name: "none", doc: `{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}`},
		{name: "top", doc: `{"a":1,"a":2}`, key: "a", prev: "a", offset: 7},
		{name: "nested", doc: `{"x":[{"k":1},{"k b":1,"k b":2}]}`, object: "x[1]", key: "k b", prev: "k b", offset: 23},
		{name: "after a nested value", doc: `{"a":{"b":[1,{"c":2}]},"a":3}`, key: "a", prev: "a", offset: 23},
		{name: "case differs, exact", doc: `{"name":1,"Name":2}`},
		{name: "case differs, folded", doc: `{"name":1,"Name":2}`, fold: true, key: "Name", prev: "name", offset: 10},
		{name: "long s folded", doc: `{"calls":1,"callſ":2}`, fold: true, key: "callſ", prev: "calls", offset: 11},
		{name: "escaped the same", doc: `{"a":1,"\u0061":2}`, key: "a", prev: "a", offset: 7},
		{name: "same key in siblings", doc: `[{"a":1},{"a":1}]`},
		{name: "deep, shortened", doc: `{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":{"j":{"k":{"l":1,"l":2}}}}}}}}}}}}`, object: "a.b.c.d.e.f….h.i.j.k", key: "l", prev: "l", offset: 62},
		{name: "deep", doc: `{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":{"j":1,"j":2}}}}}}}}}}`, object: "a.b.c.d.e.f.g.h.i", key: "j", prev: "j", offset: 52},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := readAll([]byte(tt.doc), tt.fold)
			if tt.key == "" {
				if err != nil {
					t.Fatalf("err=%v, want none", err)
				}
				return
			}
			var de *DuplicateKeyError
			if !errors.As(err, &de) {
				t.Fatalf("err=%v, want a *DuplicateKeyError", err)
			}
			if de.Object != tt.object || de.Key != tt.key || de.Prev != tt.prev || de.Offset != tt.offset {
				t.Fatalf("got %+v, want object %q key %q prev %q at %d", *de, tt.object, tt.key, tt.prev, tt.offset)
			}
			if !strings.HasPrefix(tt.doc[de.Offset:], `"`) {
				t.Fatalf("offset %d is not a key's start in %s", de.Offset, tt.doc)
			}
		})
	}
}

func TestMaxDepth(t *testing.T) {
	doc := `{"a":[{"b":[1]}]}` // depth 4
	if err := readAll([]byte(doc), false, MaxDepth(4)); err != nil {
		t.Fatalf("depth 4 with MaxDepth(4): %v", err)
	}
	err := readAll([]byte(doc), false, MaxDepth(3))
	var de *DepthError
	if !errors.As(err, &de) || de.Max != 3 || de.Path != "a[0].b" || doc[de.Offset] != '[' {
		t.Fatalf("depth 4 with MaxDepth(3): %v (%+v), want a DepthError at a[0].b", err, de)
	}
	// A long path is shortened, and its keys cut.
	long := strings.Repeat("k", 1000)
	deep := strings.Repeat(`{"`+long+`":`, 50) + "1" + strings.Repeat("}", 50)
	err = readAll([]byte(deep), false, MaxDepth(20))
	if !errors.As(err, &de) || len(de.Error()) > 1000 || !strings.Contains(de.Error(), "…") {
		t.Fatalf("deep document: %v, want a short DepthError", err)
	}
}

func TestOffsetIsTheTokenStart(t *testing.T) {
	doc := " {\"a\" : [ 1 , \"x\" , {\"b\":null} ] ,\n\t\"c\":true } "
	r := New([]byte(doc))
	for {
		tok, err := r.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var want string
		switch v := tok.(type) {
		case json.Delim:
			want = v.String()
		case string:
			want = `"`
		case nil:
			want = "n"
		case bool:
			want = "t"
		default:
			want = "1"
		}
		if !strings.HasPrefix(doc[r.Offset():], want) {
			t.Fatalf("token %v at offset %d: %q", tok, r.Offset(), doc[r.Offset():])
		}
	}
}

func TestPath(t *testing.T) {
	r := New([]byte(`{"calls":[{"id":"a","arguments":{"odd key":[0,1,{"x":2}]}}]}`))
	var paths []string
	for {
		tok, err := r.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := tok.(float64); ok && n == 2 {
			paths = append(paths, r.Path())
		}
		if s, ok := tok.(string); ok && s == "a" {
			paths = append(paths, r.Path())
		}
	}
	want := []string{"calls[0].id", `calls[0].arguments["odd key"][2].x`}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("paths %q, want %q", paths, want)
	}
}

// TestMemoryIsLinearInTheDocument reads the body that took a node to
// 1.27 GB (issue 27: nesting 2,000 deep, 200-byte keys, 0.4 MiB), counting
// what reading it allocates: a reader that builds a path string per level
// and keeps them all allocates about depth² × key / 2 (400 MB here).
func TestMemoryIsLinearInTheDocument(t *testing.T) {
	doc := deepDocument(2000, 200)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := readAll(doc, true); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	if allocated > 40*uint64(len(doc)) {
		t.Fatalf("reading a %d-byte document allocated %d bytes, want at most 40× the document", len(doc), allocated)
	}
	t.Logf("%d-byte document, nesting 2000: %d bytes allocated (%.1f× the document)", len(doc), allocated, float64(allocated)/float64(len(doc)))
}

// deepDocument nests depth objects, each with one key of keyLen bytes.
func deepDocument(depth, keyLen int) []byte {
	key := strings.Repeat("k", keyLen)
	var b bytes.Buffer
	for range depth {
		b.WriteString(`{"` + key + `":`)
	}
	b.WriteString("1")
	b.WriteString(strings.Repeat("}", depth))
	return b.Bytes()
}

// FuzzAsEncodingJSON holds the Reader to encoding/json: a document it reads
// whole is one encoding/json reads to the same value; one encoding/json
// reads whose objects hold no key twice (compared exactly, or folded) and
// that nests no deeper than the bound is one it reads; and a document
// encoding/json refuses, it refuses.
func FuzzAsEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `1`, `"s"`, `null`, `{"a":1,"b":[true,false,null,{"c":"d"}]}`,
		`{"a":1,"a":2}`, `{"name":1,"Name":2}`, `[{"a":1},{"a":1}]`, `{"a":{"a":{"a":1}}}`,
		`[[[[[[[[1]]]]]]]]`, `{"a" 1}`, `{"a":1,}`, `[1,]`, `{"\u0061":1,"a":2}`, ` {"x" : [ 1 , 2 ] } `,
		`{"a":1} {"b":2}`, `{"a":1}x`,
	} {
		f.Add([]byte(s), false, uint8(0))
		f.Add([]byte(s), true, uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, fold bool, depth uint8) {
		max := int(depth) // 0 is the default
		r := New(data, UseNumber(), MaxDepth(max))
		var got any
		err := func() error {
			tok, err := r.Token()
			if err != nil {
				return err
			}
			if fold && tok == json.Delim('{') {
				r.Fold()
			}
			got, err = r.restFolding(tok, fold)
			if err != nil {
				return err
			}
			if _, err := r.Token(); err != io.EOF {
				return errors.New("data after the value")
			}
			return nil
		}()
		var want any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		stdErr := dec.Decode(&want)
		if stdErr == nil {
			if _, e := dec.Token(); e != io.EOF {
				stdErr = errors.New("data after the value")
			}
		}
		if stdErr != nil {
			if err == nil {
				t.Fatalf("%q: the reader accepted what encoding/json refuses (%v)", data, stdErr)
			}
			return
		}
		var dup *DuplicateKeyError
		var deep *DepthError
		switch {
		case errors.As(err, &dup):
			if !hasDuplicate(data, fold) {
				t.Fatalf("%q: duplicate key reported (%v), but a second count finds none", data, err)
			}
		case errors.As(err, &deep):
			if max == 0 || nesting(data) <= max {
				t.Fatalf("%q: depth refused (%v), but it nests %d ≤ %d", data, err, nesting(data), max)
			}
		case err != nil:
			t.Fatalf("%q: refused (%v), encoding/json reads it", data, err)
		default:
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: read %#v, encoding/json %#v", data, got, want)
			}
			if hasDuplicate(data, fold) {
				t.Fatalf("%q: accepted with a duplicate key", data)
			}
		}
	})
}

// restFolding is rest with every object's keys folded when fold is set.
func (r *Reader) restFolding(tok json.Token, fold bool) (any, error) {
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for r.More() {
			kt, err := r.Token()
			if err != nil {
				return nil, err
			}
			vt, err := r.Token()
			if err != nil {
				return nil, err
			}
			if fold && vt == json.Delim('{') {
				r.Fold()
			}
			v, err := r.restFolding(vt, fold)
			if err != nil {
				return nil, err
			}
			obj[kt.(string)] = v
		}
		_, err := r.Token()
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for r.More() {
			vt, err := r.Token()
			if err != nil {
				return nil, err
			}
			if fold && vt == json.Delim('{') {
				r.Fold()
			}
			v, err := r.restFolding(vt, fold)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := r.Token()
		return arr, err
	}
	return tok, nil
}

// hasDuplicate counts keys a second way: encoding/json decodes objects
// into ordered key lists (json.RawMessage per member, via a Decoder of
// each object alone), and a repeat in one list is a duplicate.
func hasDuplicate(data []byte, fold bool) bool {
	var v json.RawMessage
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	return dupIn(v, fold)
}

func dupIn(raw json.RawMessage, fold bool) bool {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '[':
		var items []json.RawMessage
		_ = json.Unmarshal(raw, &items)
		for _, it := range items {
			if dupIn(it, fold) {
				return true
			}
		}
	case len(raw) > 0 && raw[0] == '{':
		dec := json.NewDecoder(bytes.NewReader(raw))
		_, _ = dec.Token()
		seen := map[string]bool{}
		for dec.More() {
			kt, _ := dec.Token()
			k := kt.(string)
			if fold {
				k = FoldName(k)
			}
			if seen[k] {
				return true
			}
			seen[k] = true
			var member json.RawMessage
			_ = dec.Decode(&member)
			if dupIn(member, fold) {
				return true
			}
		}
	}
	return false
}

// nesting is the deepest nesting of objects and arrays in valid JSON.
func nesting(data []byte) int {
	dec := json.NewDecoder(bytes.NewReader(data))
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

// FuzzMember holds Member to the pattern it names: a key that matches
// ^[A-Za-z_][A-Za-z0-9_]*$ follows a dot, any other is quoted in brackets
// and reads back as itself.
func FuzzMember(f *testing.F) {
	re := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	for _, s := range []string{"", "a", "_", "a1", "1a", "a-b", "a b", "é", "A_Z_09", "a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		got := Member("p", key)
		if re.MatchString(key) {
			if got != "p."+key {
				t.Fatalf("Member(p, %q) = %q, want p.%s", key, got, key)
			}
			return
		}
		q, ok := strings.CutPrefix(got, "p[")
		q, ok2 := strings.CutSuffix(q, "]")
		back, err := strconv.Unquote(q)
		if !ok || !ok2 || err != nil || back != strings.ToValidUTF8(key, "\uFFFD") && back != key {
			t.Fatalf("Member(p, %q) = %q, want the key quoted in brackets", key, got)
		}
	})
}
