package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestNormalizeArguments(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    string
		wantErr string // substring of the message; "" means success
	}{
		{name: "object", raw: `{"path": "a", "limit": 5}`, want: `{"path":"a","limit":5}`},
		{name: "keeps key order", raw: `{"b":1,"a":2}`, want: `{"b":1,"a":2}`},
		{name: "empty", raw: ``, want: `{}`},
		{name: "whitespace", raw: " \n\t", want: `{}`},
		{name: "null", raw: `null`, want: `{}`},
		{name: "string holding object", raw: `"{\"path\": \"a\", \"n\": [1, 2]}"`, want: `{"path":"a","n":[1,2]}`},
		{name: "empty string", raw: `""`, want: `{}`},
		{name: "string holding null", raw: `" null "`, want: `{}`},
		{name: "nested duplicates at different levels are fine", raw: `{"a":{"a":1}}`, want: `{"a":{"a":1}}`},
		{name: "truncated object", raw: `{"path": "/tmp/a`, wantErr: "unexpected end at byte 16): the model's response was probably truncated"},
		{name: "truncated string arguments", raw: `"{\"path\": \"/tmp/a"`, wantErr: "inside the string: unexpected end at byte 16): the model's response was probably truncated"},
		{name: "bad literal", raw: `{"a": tru}`, wantErr: "arguments are not valid JSON (invalid character '}' in literal true"},
		{name: "trailing data", raw: `{"a":1} {"b":2}`, wantErr: "after top-level value"},
		{name: "string holding garbage", raw: `"not json"`, wantErr: "inside the string: invalid character 'o'"},
		{name: "array", raw: `[1,2]`, wantErr: "arguments must be a JSON object, got an array"},
		{name: "number", raw: `42`, wantErr: "got a number"},
		{name: "string holding array", raw: `"[1]"`, wantErr: "got an array"},
		{name: "string holding string", raw: `"\"{}\""`, wantErr: "got a string"},
		{name: "duplicate field", raw: `{"a":1,"a":2}`, wantErr: "arguments.a: field appears more than once"},
		{name: "nested duplicate", raw: `{"x":[{"k b":1,"k b":2}]}`, wantErr: `arguments.x[0]["k b"]: field appears more than once`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeArguments(json.RawMessage(tt.raw))
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalidArguments) {
					t.Fatalf("err=%v, want ErrInvalidArguments", err)
				}
				var ae *ArgumentError
				if !errors.As(err, &ae) {
					t.Fatalf("err=%T, want *ArgumentError", err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err=%q, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err=%v, want nil", err)
			}
			if string(got) != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func FuzzNormalizeArguments(f *testing.F) {
	for _, s := range []string{
		``, `null`, `{}`, `{"a":1}`, `"{\"a\":1}"`, `"{\"a\":`, `{"a":1,"a":2}`, `[1]`, `"x"`,
		`{"a":{"b":[1,2,{"c":null}]}}`, `  {"a" : "\u00e9\ud83d\ude00"}  `, `"{\"a\":\"b\\\"c\"}"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := NormalizeArguments(raw)
		if err != nil {
			var ae *ArgumentError
			if !errors.As(err, &ae) || len(ae.Problems) == 0 {
				t.Fatalf("err=%v (%T), want an *ArgumentError with problems", err, err)
			}
			return
		}
		var obj map[string]any
		if err := json.Unmarshal(got, &obj); err != nil || obj == nil {
			t.Fatalf("output %q is not a JSON object: %v", got, err)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, got); err != nil || !bytes.Equal(buf.Bytes(), got) {
			t.Fatalf("output %q is not compact", got)
		}
		again, err := NormalizeArguments(got)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("not idempotent: %q -> %q, %v", got, again, err)
		}
	})
}

func TestSameArguments(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"a":1,"b":[true,null]}`, `{ "b" : [ true , null ] , "a" : 1 }`, true},
		{`{"a":1}`, `"{\"a\": 1}"`, true},
		{`{"a":"x"}`, `{"a":"\u0078"}`, true},
		{`{"a":5}`, `{"a":5.0}`, true},
		{`{"a":5}`, `{"a":5e0}`, true},
		{`{"a":500}`, `{"a":5E+2}`, true},
		{`{"a":0}`, `{"a":-0.0}`, true},
		{``, `{}`, true},
		{`null`, `""`, true},
		{`{"a":1}`, `{"a":1.5}`, false},
		{`{"a":5}`, `{"a":"5"}`, false},
		{`{"a":"5"}`, `{"a":5}`, false},
		{`{"a":true}`, `{"a":"true"}`, false},
		{`{"a":null}`, `{}`, false},
		{`{"a":[1,2]}`, `{"a":[2,1]}`, false},
		{`{"a":[1]}`, `{"a":[1,1]}`, false},
		{`{"a":{}}`, `{"a":[]}`, false},
		{`{"a":1}`, `{"a":1,"b":1}`, false},
		{`{"a":1e999999999}`, `{"a":1e999999999}`, true},
		{`{"a":1e999999999}`, `{"a":10e999999998}`, true},
		{`{"a":1e9999999999999999}`, `{"a":10e9999999999999998}`, false}, // exponents too large to hold: compared as written
		{`{"a": cut`, `{"a": cut`, true},
		{`{"a": cut`, `{"a":  cut`, false},
		{`[1, 2]`, `[1,2]`, true},
		{`[1, 2]`, `{"a":1}`, false},
		{`{"a":1,"a":1}`, `{"a":1}`, false},
	} {
		if got := SameArguments(json.RawMessage(c.a), json.RawMessage(c.b)); got != c.same {
			t.Errorf("SameArguments(%s, %s)=%v, want %v", c.a, c.b, got, c.same)
		}
		if got := SameArguments(json.RawMessage(c.b), json.RawMessage(c.a)); got != c.same {
			t.Errorf("SameArguments(%s, %s)=%v, want %v (reversed)", c.b, c.a, got, c.same)
		}
	}
}

// FuzzSameArguments: arguments are the same as themselves, as their
// normalized form and as any re-encoding of it; the relation is symmetric.
func FuzzSameArguments(f *testing.F) {
	for _, s := range [][2]string{
		{`{"a":1}`, `{"a":1.0}`}, {`"{\"a\":[1,2]}"`, `{"a":[1,2]}`}, {`{"a":"5"}`, `{"a":5}`},
		{`{"a": cut`, ``}, {`{"b":{"c":null},"a":true}`, `{"a":true,"b":{"c":null}}`}, {`1e5`, `{}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if !SameArguments(a, a) {
			t.Fatalf("%q is not the same as itself", a)
		}
		if SameArguments(a, b) != SameArguments(b, a) {
			t.Fatalf("not symmetric for %q, %q", a, b)
		}
		norm, err := NormalizeArguments(a)
		if err != nil {
			return
		}
		if !SameArguments(a, norm) {
			t.Fatalf("%q is not the same as its normal form %q", a, norm)
		}
		_, obj, err := parseArguments(norm)
		if err != nil {
			t.Fatal(err)
		}
		again, err := json.MarshalIndent(obj, "", " ") // keys sorted, spaced, strings re-escaped
		if err != nil {
			t.Fatal(err)
		}
		if !SameArguments(a, again) {
			t.Fatalf("%q is not the same as its re-encoding %q", a, again)
		}
	})
}
