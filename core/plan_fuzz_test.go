package core

import (
	"encoding/json"
	"testing"
)

// FuzzEscalatesAsDecoded holds escalates' shortcut to what decoding the
// arguments says: a call that asks to leave the sandbox must never be
// planned as one that does not (the tool decodes the same bytes).
func FuzzEscalatesAsDecoded(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"escalate":true}`, `{"ESCALATE":true}`, `{"EsCaLaTe":true}`,
		`{"e\u0073calate":true}`, "{\"e\u017fcalate\":true}", `{"escalate":false}`,
		`{"command":"ls","escalate":true}`, `{"command":"echo escalate"}`, `[1,2]`, `"x"`, `{"a":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		var a struct {
			Escalate bool `json:"escalate"`
		}
		want := json.Unmarshal(args, &a) == nil && a.Escalate
		if got := escalates(args); got != want {
			t.Fatalf("escalates(%q) = %v, decoding says %v", args, got, want)
		}
	})
}
