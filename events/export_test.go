package events

// The generated encoders and the hash Encode keeps, for the tests of
// package events_test.

// AppendPayloadJSON is appendPayloadJSON.
func AppendPayloadJSON(dst []byte, p any) ([]byte, bool) { return appendPayloadJSON(dst, p) }

// AppendPayloadCanonical is appendPayloadCanonical.
func AppendPayloadCanonical(dst []byte, p any) ([]byte, bool) { return appendPayloadCanonical(dst, p) }

// HashedAtEncode returns the Chain1 hash computed from the payload's value
// Encode kept for ev, if ev is as encoded and its type has a generated
// encoder.
func HashedAtEncode(ev Event) (string, bool) {
	if !ev.encodedAsIs() || ev.enc.payload == nil {
		return "", false
	}
	h := hashPayload(ev, ev.enc.payload, ev.enc.timeText)
	return h, h != ""
}
