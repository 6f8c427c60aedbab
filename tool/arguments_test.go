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
