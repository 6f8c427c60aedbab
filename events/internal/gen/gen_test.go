package gen

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

type inner struct {
	A string `json:"a"`
	B int
	C bool
}

type other struct {
	B int
	D bool `json:"d"`
}

type tagged struct {
	X int `json:"B"` // as deep as untaggedB.B, and tagged: it wins
}

type deep struct{ inner }

// shapes exercises encoding/json's field rules: embedding, a shallower
// field hiding an embedded one, two as deep cancelling out, a tagged one
// winning over an untagged one, "-", unexported fields, default names.
type shapes struct {
	inner
	other
	A       string `json:"a"` // hides inner.A
	Skipped string `json:"-"`
	Dash    string `json:"-,"` // named "-"
	hidden  string
	Plain   int
	deep
}

type untaggedB struct{ B int }

type tagBeats struct {
	untaggedB
	tagged
}

func (s shapes) sample() shapes {
	s.inner = inner{A: "ia", B: 1, C: true}
	s.other = other{B: 2, D: true}
	s.A, s.Skipped, s.Dash, s.hidden, s.Plain = "a", "s", "d", "h", 3
	s.deep = deep{inner{A: "da", B: 4, C: true}}
	return s
}

// memberNames returns the member names of a JSON object, in order.
func memberNames(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	var names []string
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// TestFieldsAsEncodingJSON holds fields to encoding/json's own choice and
// order of members.
func TestFieldsAsEncodingJSON(t *testing.T) {
	for _, v := range []any{shapes{}.sample(), tagBeats{untaggedB{1}, tagged{2}}, inner{A: "x"}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := fields(reflect.TypeOf(v))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range fs {
			got = append(got, f.name)
		}
		if want := memberNames(t, b); !slices.Equal(got, want) {
			t.Errorf("%T: fields %q, encoding/json writes %q (%s)", v, got, want, b)
		}
	}
	// Of two fields named alike, the ones that win are encoding/json's.
	fs, _ := fields(reflect.TypeFor[tagBeats]())
	if len(fs) != 1 || fs[0].expr != "v.tagged.X" {
		t.Errorf("tagBeats: fields %+v, want the tagged v.tagged.X alone", fs)
	}
	fs, _ = fields(reflect.TypeFor[shapes]())
	for _, f := range fs {
		if f.name == "a" && f.expr != "v.A" {
			t.Errorf("shapes: member a is %s, want the shallowest, v.A", f.expr)
		}
	}
}

type withMap struct{ M map[string]int }
type withInterface struct{ I any }
type withFloat32 struct{ F float32 }
type withStringOpt struct {
	N int `json:"n,string"`
}
type marshals struct{}

func (marshals) MarshalJSON() ([]byte, error) { return []byte(`1`), nil }

type withMarshaler struct{ M marshals }
type texts struct{}

func (*texts) MarshalText() ([]byte, error) { return []byte(`t`), nil }

type withTextMarshaler struct{ T texts }
type withTime struct{ T time.Time }
type withEmbeddedPointer struct{ *inner }
type withOddName struct {
	X int `json:"a<b"`
}
type withArray struct{ A [2]int }
type withPointerToInt struct{ P *int }

// TestRefusals: a field the generator does not reproduce exactly makes
// generation fail, naming it, rather than produce an encoder that differs
// from json.Marshal.
func TestRefusals(t *testing.T) {
	pkg := reflect.TypeFor[inner]().PkgPath()
	for _, c := range []struct {
		typ  reflect.Type
		want string
	}{
		{reflect.TypeFor[withMap](), "withMap.M"},
		{reflect.TypeFor[withInterface](), "withInterface.I"},
		{reflect.TypeFor[withFloat32](), "withFloat32.F"},
		{reflect.TypeFor[withStringOpt](), "withStringOpt.N"},
		{reflect.TypeFor[withMarshaler](), "withMarshaler.M"},
		{reflect.TypeFor[withTextMarshaler](), "withTextMarshaler.T"},
		{reflect.TypeFor[withTime](), "withTime.T"},
		{reflect.TypeFor[withEmbeddedPointer](), "withEmbeddedPointer.inner"},
		{reflect.TypeFor[withOddName](), "withOddName.X"},
		{reflect.TypeFor[withArray](), "withArray.A"},
		{reflect.TypeFor[withPointerToInt](), "withPointerToInt.P"},
	} {
		_, err := source(pkg, []reflect.Type{c.typ})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %s", c.typ, err, c.want)
		}
	}
	if _, err := source(pkg, []reflect.Type{reflect.TypeFor[shapes]()}); err != nil {
		t.Errorf("shapes: %v", err)
	}
}
