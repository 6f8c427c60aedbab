package events

import (
	"math/rand/v2"
	"testing"
	"unicode/utf8"

	"github.com/callsheet/callsheet/internal/jsonstr"
)

// TestWordChecks holds the eight-bytes-at-a-time checks to the byte tables
// they stand for: every byte value at every position, beside neighbours at
// each table's edges, and a million random words.
func TestWordChecks(t *testing.T) {
	// What encoding/json writes in a string as it is.
	byteSafe := func(c byte) bool {
		return c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	check := func(w [8]byte) {
		s := string(w[:])
		x := jsonstr.Load64(s, 0)
		json, canon, envelope := true, true, true
		for _, c := range w {
			json = json && byteSafe(c)
			canon = canon && plain[c]
			envelope = envelope && jsonPlainByte[c]
		}
		if got := jsonstr.Safe8(x); got != json {
			t.Fatalf("jsonstr.Safe8(%q)=%v, the table says %v", s, got, json)
		}
		if got := canonPlain8(x); got != canon {
			t.Fatalf("canonPlain8(%q)=%v, the table says %v", s, got, canon)
		}
		if got := jsonPlain(s); got != envelope {
			t.Fatalf("jsonPlain(%q)=%v, the table says %v", s, got, envelope)
		}
	}
	for _, fill := range []byte{'a', 0x00, 0x1f, 0x20, 0x21, '"' + 1, '\\' - 1, 0x7e, 0x7f, 0x80, 0xff} {
		for pos := range 8 {
			for c := range 256 {
				w := [8]byte{fill, fill, fill, fill, fill, fill, fill, fill}
				w[pos] = byte(c)
				check(w)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		var w [8]byte
		for i := range w {
			// Mostly printable ASCII, so that all-safe words occur.
			if r.IntN(16) == 0 {
				w[i] = byte(r.IntN(256))
			} else {
				w[i] = byte(0x20 + r.IntN(0x5f))
			}
		}
		check(w)
	}
}
