package api

import (
	"testing"
)

// completeNextBody is package worker's complete with "next": what every
// harness call's worker posts.
const completeNextBody = `{"content":[{"type":"text","text":"ok"}],"next":{"max":1,"tools":["ext_noop"],"wait_ms":30000,"worker":"bench"}}`

// BenchmarkDecodeComplete times the strict decode of a worker's complete
// with "next" (go test ./api -run '^$' -bench DecodeComplete): the whole
// decodeJSON, the duplicate-key check (quickKeysOK clears it), and the full
// scan it saves.
func BenchmarkDecodeComplete(b *testing.B) {
	body := []byte(completeNextBody)
	b.Run("strict", func(b *testing.B) {
		for b.Loop() {
			var req completeRequest
			if err := decodeJSON(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("duplicate-keys", func(b *testing.B) {
		for b.Loop() {
			if err := duplicateKey(body, freeFields...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("full-scan", func(b *testing.B) {
		for b.Loop() {
			if err := scanKeys(body, "", freeFields, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}
