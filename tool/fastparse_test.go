package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fastParseSeeds are arguments of every shape the one-pass parser meets,
// and the malformed ones it must leave to the token decoder.
var fastParseSeeds = []string{
	``, `null`, `{}`, ` { } `, `{"a":1}`, `{"tag": "x"}`, "{\t\"a\"\r\n:\n[ 1 , 2 ]\n}",
	`{"a":-0,"b":0.5,"c":1e2,"d":-1.25E-3,"e":1E+9,"f":12345678901234567890123}`,
	`{"a":true,"b":false,"c":null,"d":[],"e":{},"f":[[],[{}]]}`,
	`{"s":"plain","q":"say \"hi\"","e":"\\ \/ \b \f \n \r \t","u":"\u00e9\ud83d\ude00","x":"é😀"}`,
	`{"lone":"\ud800","pair":"\ud83d\ude00","bad":"\udc00\ud800"}`, "{\"inv\":\"\xff\xfe\"}",
	"{\"k\xff\":1}", `{"\u0061":1,"a":2}`, `{"a":1,"a":2}`, `{"x":[{"k b":1,"k b":2}]}`,
	`"{\"a\":1}"`, `"  {\"a\": [1, 2]}  "`, `""`, `" null "`, `"\u00a0{}\u00a0"`, `"\"{}\""`, `"[1]"`,
	`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":+1}`, `{"a":0x1}`,
	`{"a":tru}`, `{"a":truex}`, `{"a":nul}`, `{"a":1,}`, `{,}`, `{"a" 1}`, `{"a":[1,]}`, `{"a":[,1]}`,
	`{"a":1} {"b":2}`, `{"a":1}x`, `[1]`, `42`, `"x"`, `{"a":"\x01"}`, `{"a":"\q"}`, `{"a":"\u12"}`,
	`{"a":"\u12g4"}`, `{"a":"unterminated}`, `{"a":1`, `{"a"`, `{`, `{"a":{"b":{"c":[1,{"d":null}]}}}`,
	"\f{}\v", "\u0085{\"a\":1}", `{"a":"<b> & c"}`, "{\"ls\":\"\u2028\u2029\"}",
}

// FuzzFastParseAsStd holds the one-pass parser to the token decoder: for any
// input, whatever fastParseArguments accepts, parseArgumentsStd accepts
// with the same compact bytes and the same value, and it accepts everything
// parseArgumentsStd does (short of maxFastDepth). parseArguments, which
// takes the standard path for whatever the fast one refuses, therefore
// returns exactly what it returned before the fast path existed, messages
// included.
func FuzzFastParseAsStd(f *testing.F) {
	for _, s := range fastParseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		data := bytes.TrimSpace(raw)
		if len(data) == 0 || string(data) == "null" {
			return // parseArguments answers {} before either parser
		}
		fastOut, fastObj, ok := fastParseArguments(data)
		stdOut, stdObj, err := parseArgumentsStd(data)
		switch {
		case ok && err != nil:
			t.Fatalf("%q: fast path accepted (%s), standard path refused: %v", raw, fastOut, err)
		case !ok && err == nil:
			t.Fatalf("%q: standard path accepted (%s), fast path refused", raw, stdOut)
		case !ok:
			return
		}
		if !bytes.Equal(fastOut, stdOut) {
			t.Fatalf("%q: compact form %q, standard %q", raw, fastOut, stdOut)
		}
		if !reflect.DeepEqual(fastObj, stdObj) {
			t.Fatalf("%q: value %#v, standard %#v", raw, fastObj, stdObj)
		}
		// The output is the parser's own, not a view of the input.
		before := string(fastOut)
		for i := range raw {
			raw[i] = 'x'
		}
		if string(fastOut) != before {
			t.Fatalf("output %q aliases the input", before)
		}
	})
}

// TestFastParseDeepNesting: arguments nested MaxArgumentDepth deep are
// accepted by both parsers; one level more is refused by both, with a
// message naming the bound and where.
func TestFastParseDeepNesting(t *testing.T) {
	nest := func(levels int) string { // the arguments object is level 1
		return `{"a":` + strings.Repeat("[", levels-1) + strings.Repeat("]", levels-1) + `}`
	}
	deepest := nest(MaxArgumentDepth)
	if _, _, ok := fastParseArguments([]byte(deepest)); !ok {
		t.Fatalf("fast path refused arguments %d deep", MaxArgumentDepth)
	}
	if got, err := NormalizeArguments([]byte(deepest)); err != nil || string(got) != deepest {
		t.Fatalf("NormalizeArguments of arguments %d deep: %.40s…, %v; want them as sent", MaxArgumentDepth, got, err)
	}
	for _, levels := range []int{MaxArgumentDepth + 1, 5000} {
		tooDeep := nest(levels)
		if _, _, ok := fastParseArguments([]byte(tooDeep)); ok {
			t.Fatalf("fast path accepted arguments %d deep", levels)
		}
		_, err := NormalizeArguments([]byte(tooDeep))
		if !errors.Is(err, ErrInvalidArguments) || !strings.Contains(err.Error(), "deeper than 64 levels") || !strings.Contains(err.Error(), "arguments.a[0][0][0]") {
			t.Fatalf("NormalizeArguments of arguments %d deep: err=%v, want one naming the bound and where", levels, err)
		}
	}
}

// FuzzAppendValueAsMarshal holds appendValue to json.Marshal, byte for
// byte, on every value parseArguments returns, with integer forms applied
// and a default (a json.RawMessage) added, as the typed decoder writes them.
func FuzzAppendValueAsMarshal(f *testing.F) {
	for _, s := range fastParseSeeds {
		f.Add([]byte(s), []byte(`"dflt <&>"`))
	}
	f.Add([]byte(`{"a":"\u007f\u0000\u001f\u2028\u2029\ufffd"}`), []byte(`{ "b" : [1, 2.0] }`))
	f.Add([]byte(`{"n":2.0,"m":1e2,"k":-0.0}`), []byte(`not json`))
	f.Add([]byte(`{"z":1,"a":2,"é":3,"A":4,"_":5,"":6}`), []byte(``))
	f.Fuzz(func(t *testing.T, raw, dflt []byte) {
		_, obj, err := parseArguments(raw)
		if err != nil {
			return
		}
		integerForms(obj)
		if len(dflt) > 0 {
			obj["\x00default"] = json.RawMessage(dflt)
		}
		want, werr := json.Marshal(obj)
		got, ok := appendValue(nil, obj)
		if werr != nil {
			if ok {
				t.Fatalf("%q: appendValue wrote %q, json.Marshal refused: %v", raw, got, werr)
			}
			if _, merr := marshalValue(obj); merr == nil {
				t.Fatalf("%q: marshalValue accepted what json.Marshal refused", raw)
			}
			return
		}
		if !ok {
			t.Fatalf("%q: appendValue refused what json.Marshal wrote: %q", raw, want)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%q:\nappendValue  %q\njson.Marshal %q", raw, got, want)
		}
	})
}
