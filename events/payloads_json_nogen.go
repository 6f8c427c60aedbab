//go:build callsheet_nogen

package events

// Built only for events/internal/gen (go generate ./events), which writes
// payloads_json.go and so must build without it: every payload is left to
// json.Marshal and hashed from its bytes.

func appendPayloadJSON(dst []byte, _ any) ([]byte, bool)      { return dst, false }
func appendPayloadCanonical(dst []byte, _ any) ([]byte, bool) { return dst, false }
