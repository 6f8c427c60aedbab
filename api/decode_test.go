package api

import (
	"encoding/json"
	"strings"
	"testing"
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
