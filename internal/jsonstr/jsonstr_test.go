package jsonstr_test

import (
	"encoding/json"
	"testing"

	"github.com/callsheet/callsheet/internal/jsonstr"
)

// FuzzAppendAsMarshal holds Append to json.Marshal of the same string, byte
// for byte: both the events' stored bytes and the tools' decoded arguments
// depend on it.
func FuzzAppendAsMarshal(f *testing.F) {
	for _, s := range []string{
		"", "plain ascii, longer than eight bytes", `"quoted" \ back`, "<a href=\"x\">&amp;</a>",
		"tab\tnew\nline\r\x00\x1f\x7f", "\u2028\u2029", "caf\u00e9 \U0001F600", "\xff\xfe bad utf-8 \xc3",
		"12345678<", "1234567\x80",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s) // a string always marshals
		if got := jsonstr.Append(nil, s); string(got) != string(want) {
			t.Fatalf("Append(%q) = %s, json.Marshal writes %s", s, got, want)
		}
	})
}
