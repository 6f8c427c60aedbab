package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/callsheet/callsheet/events"
)

// TestCanonicalRFC8785Vectors checks the encoder against the test data of
// the RFC 8785 reference implementation (testdata/jcs/README.md).
func TestCanonicalRFC8785Vectors(t *testing.T) {
	ins, err := filepath.Glob("testdata/jcs/*.in.json")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no vectors: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(in, ".in.json") + ".out.json")
			if err != nil {
				t.Fatal(err)
			}
			want = bytes.TrimRight(want, "\n")
			if name == "values" {
				// The one deliberate difference: no rounding to a double.
				want = bytes.Replace(want, []byte("333333333.3333333,"), []byte("333333333.33333329,"), 1)
			}
			got, err := events.Canonical(src)
			if err != nil {
				t.Fatalf("Canonical: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Canonical(%s)\n got %s\nwant %s", in, got, want)
			}
		})
	}
}

func TestCanonicalNumbers(t *testing.T) {
	cases := []struct{ in, want string }{
		{"0", "0"}, {"-0", "0"}, {"-0.0e7", "0"}, {"0.000", "0"},
		{"1", "1"}, {"-1", "-1"}, {"10", "10"}, {"100", "100"}, {"56.0", "56"}, {"4.50", "4.5"},
		{"1E30", "1e+30"}, {"1e21", "1e+21"}, {"1e20", "100000000000000000000"},
		{"123456789012345678901", "123456789012345678901"}, // 21 digits: fixed
		{"1234567890123456789012", "1.234567890123456789012e+21"},
		{"2e-3", "0.002"}, {"0.000001", "0.000001"}, {"1e-7", "1e-7"}, {"0.0000001", "1e-7"},
		{"0.000000000000000000000000001", "1e-27"}, {"-1.5e-9", "-1.5e-9"},
		{"12.5e1", "125"}, {"125e-1", "12.5"}, {"0.1", "0.1"}, {"00.1e0", ""}, // leading zero: not JSON
		{"9007199254740993", "9007199254740993"}, // 2^53+1: RFC 8785 would write 9007199254740992
		{"1234567890123456789", "1234567890123456789"},
		{"1152921504606846976", "1152921504606846976"},
		{"333333333.33333329", "333333333.33333329"},
		{"1e400", "1e+400"}, {"-1e-400", "-1e-400"},
		{"1e1000000000000000000000", "1e+1000000000000000000000"},
		{"123e-1000000000000000000002", "1.23e-1000000000000000000000"},
		{"9.999999999999997e-7", "9.999999999999997e-7"},
	}
	for _, c := range cases {
		got, err := events.Canonical([]byte(c.in))
		if c.want == "" {
			if err == nil {
				t.Errorf("Canonical(%s) = %s, want an error", c.in, got)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
}

// TestCanonicalNumbersMatchRFC8785 checks that every number encoding/json
// writes for a double is laid out exactly as RFC 8785 lays out that double
// (the reference implementation's NumberToJSON), over the edge cases of its
// test data and a million random doubles.
func TestCanonicalNumbersMatchRFC8785(t *testing.T) {
	check := func(f float64) {
		t.Helper()
		text, err := json.Marshal(f)
		if err != nil {
			return // NaN, Inf: not JSON
		}
		want, err := jcs.NumberToJSON(f)
		if err != nil {
			t.Fatalf("NumberToJSON(%v): %v", f, err)
		}
		got, err := events.Canonical(text)
		if err != nil || string(got) != want {
			t.Fatalf("Canonical(%s) = %s, %v; RFC 8785 writes %s (bits %#x)", text, got, err, want, math.Float64bits(f))
		}
	}
	for _, bits := range []uint64{0x4340000000000001, 0x4340000000000002, 0x444b1ae4d6e2ef50, 0x3eb0c6f7a0b5ed8d,
		0x3eb0c6f7a0b5ed8c, 0x8000000000000000, 0, 1, 0x7fefffffffffffff, 0x0010000000000000, 0x000fffffffffffff} {
		check(math.Float64frombits(bits))
	}
	r := rand.New(rand.NewPCG(8785, 1))
	n := 1_000_000
	if testing.Short() {
		n = 50_000
	}
	for range n {
		check(math.Float64frombits(r.Uint64()))
		check(float64(r.Int64N(1<<53)) * math.Pow10(r.IntN(40)-20))
	}
}

func TestCanonicalStringsAndObjects(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"escapes", `"\u0041\/\b\f\n\r\t\u0001\u001f\u007f\"\\"`, `"A/\b\f\n\r\t\u0001\u001f` + "\x7f" + `\"\\"`},
		{"html stays", `"\u003c/script\u003e \u0026 \u2028"`, "\"</script> & \u2028\""},
		{"pair", `"\ud83d\ude02"`, "\"\U0001F602\""},
		{"lone high", `"\ud83dA"`, "\"\uFFFDA\""},
		{"lone low", `"\ude02"`, "\"\uFFFD\""},
		{"high then high then low", `"\ud83d\ud83d\ude02"`, "\"\uFFFD\U0001F602\""},
		{"high then escape", `"\ud83d\n"`, "\"\uFFFD\\n\""},
		{"invalid utf8", "\"a\xffb\xe2\x82c\"", "\"a\uFFFDb\uFFFD\uFFFDc\""},
		{"utf8 surrogate", "\"\xed\xa0\x80\"", "\"\uFFFD\uFFFD\uFFFD\""},
		{"sorted", `{"b":1,"a":2,"c":{"z":[],"y":{}}}`, `{"a":2,"b":1,"c":{"y":{},"z":[]}}`},
		{"utf16 order", "{\"\uff61\":1,\"\U0001F602\":2,\"\u00e9\":3}", "{\"\u00e9\":3,\"\U0001F602\":2,\"\uff61\":1}"},
		{"escaped names sort decoded", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{"duplicates kept in order", `{"b":1,"a":2,"b":3,"a":4}`, `{"a":2,"a":4,"b":1,"b":3}`},
		{"whitespace", " \t\n{ \"a\" : [ 1 , true , null , false ] }\r\n", `{"a":[1,true,null,false]}`},
		{"many members", `{"p":1,"o":1,"n":1,"m":1,"l":1,"k":1,"j":1,"i":1,"h":1,"g":1,"f":1,"e":1,"d":1,"c":1,"b":1,"a":1,"q":{"b":0,"a":0}}`,
			`{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1,"l":1,"m":1,"n":1,"o":1,"p":1,"q":{"a":0,"b":0}}`},
	}
	for _, c := range cases {
		got, err := events.Canonical([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%s: Canonical(%q) = %q, %v; want %q", c.name, c.in, got, err, c.want)
		}
	}
}

func TestCanonicalRefusesWhatIsNotJSON(t *testing.T) {
	for _, in := range []string{``, ` `, `{`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{1:2}`, `[1 2]`, `01`, `1.`, `.5`, `-`, `1e`, `+1`,
		`"a`, "\"a\tb\"", `"\x"`, `"\u12"`, `"\u12g4"`, `tru`, `nul`, `[]]`, `{} {}`, `NaN`, `Infinity`, `0x10`,
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001)} {
		got, err := events.Canonical([]byte(in))
		if err == nil {
			t.Errorf("Canonical(%q) = %q, want an error", in, got)
			continue
		}
		if !errors.Is(err, events.ErrCanonical) || !strings.Contains(err.Error(), "at byte") {
			t.Errorf("Canonical(%q): error %q does not wrap ErrCanonical with its offset", in, err)
		}
	}
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	if _, err := events.Canonical([]byte(deep)); err != nil {
		t.Errorf("10000 levels (encoding/json's limit): %v", err)
	}
}

// FuzzCanonical checks, for any input: the encoder accepts exactly what
// encoding/json accepts; its output is valid UTF-8 JSON with the same value
// (as encoding/json decodes both); encoding it again changes nothing; and for
// I-JSON input (what encoding/json writes from a decoded value) it is byte
// for byte the output of the RFC 8785 reference implementation.
func FuzzCanonical(f *testing.F) {
	ins, _ := filepath.Glob("testdata/jcs/*.in.json")
	for _, in := range ins {
		b, _ := os.ReadFile(in)
		f.Add(b)
	}
	for _, s := range []string{`{"b":1,"a":[1e400,-0,0.1e-9]}`, "\"\xff\\ud800\"", `{"a":1,"a":2}`, `[{"\u00e9":1,"\uffff":2,"\ud83d\ude02":3}]`,
		`12345678901234567890`, `"\u0000\u001f"`, `{"":{"":[]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		got, err := events.Canonical(src)
		if valid := json.Valid(src); valid != (err == nil) {
			t.Fatalf("json.Valid=%v but Canonical error=%v for %q", valid, err, src)
		}
		if err != nil {
			return
		}
		if !utf8.Valid(got) || !json.Valid(got) {
			t.Fatalf("Canonical(%q) = %q: not valid UTF-8 JSON", src, got)
		}
		again, err := events.Canonical(got)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("not idempotent: %q → %q → %q (%v)", src, got, again, err)
		}
		var a, b any
		if json.Unmarshal(src, &a) != nil || json.Unmarshal(got, &b) != nil {
			return // numbers beyond a double: encoding/json cannot hold them
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("value changed: %q (%#v) → %q (%#v)", src, a, got, b)
		}
		ijson, err := json.Marshal(a)
		if err != nil {
			return
		}
		ours, err := events.Canonical(ijson)
		if err != nil {
			t.Fatalf("Canonical(%q): %v", ijson, err)
		}
		ref, err := jcs.Transform(ijson)
		if err != nil {
			t.Fatalf("reference Transform(%q): %v", ijson, err)
		}
		if !bytes.Equal(ours, ref) {
			t.Fatalf("differs from RFC 8785's reference for I-JSON %q:\n ours %q\n  ref %q", ijson, ours, ref)
		}
	})
}
