package events

// The generated encoders and the hash Encode keeps, for the tests of
// package events_test.

// AppendPayloadJSON is appendPayloadJSON.
func AppendPayloadJSON(dst []byte, p any) ([]byte, bool) { return appendPayloadJSON(dst, p) }

// AppendPayloadCanonical is appendPayloadCanonical.
func AppendPayloadCanonical(dst []byte, p any) ([]byte, bool) { return appendPayloadCanonical(dst, p) }

// HashedAtEncode returns the hash Encode kept for ev, if ev is as encoded.
func HashedAtEncode(ev Event) (string, bool) {
	if !ev.encodedAsIs() || ev.enc.hash == "" {
		return "", false
	}
	return ev.enc.hash, true
}
