package natslog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/nats-io/nats.go/jetstream"
)

// A publish's acknowledgement, read the way jetstream's PublishMsg reads it,
// its usual form without reflection: a reflective decode costs about 2 µs and
// 8 allocations, and every append waits for one.

// ackPrefix is how nats-server starts the acknowledgement of a message stored
// on stream (no JetStream domain): the template of its stream.go, `{"stream":%q,"seq":`.
func ackPrefix(stream string) []byte {
	return fmt.Appendf(nil, "{%q:%q,%q:", "stream", stream, "seq")
}

// ackDuplicate ends the acknowledgement of a message the stream already held.
const ackDuplicate = `,"duplicate": true}`

// ackFast reads data when it is exactly prefix, a sequence and `}` or
// ackDuplicate: what nats-server writes for a message stored, or found stored
// already, on the stream prefix names. ok is false for anything else (an
// error, a domain, a batch, another spelling), which decodeAck hands to
// encoding/json; when ok, encoding/json reads data the same way
// (FuzzAckFast).
func ackFast(data, prefix []byte, stream string) (ack pubAck, ok bool) {
	rest, found := bytes.CutPrefix(data, prefix)
	if !found {
		return pubAck{}, false
	}
	n, seq := 0, uint64(0)
	for ; n < len(rest) && rest[n] >= '0' && rest[n] <= '9'; n++ {
		d := uint64(rest[n] - '0')
		if seq > (math.MaxUint64-d)/10 {
			return pubAck{}, false // over a uint64: encoding/json refuses it
		}
		seq = seq*10 + d
	}
	if n == 0 || (n > 1 && rest[0] == '0') { // JSON has no leading zeros
		return pubAck{}, false
	}
	switch tail := rest[n:]; {
	case len(tail) == 1 && tail[0] == '}':
		return pubAck{Stream: stream, Sequence: seq}, true
	case string(tail) == ackDuplicate:
		return pubAck{Stream: stream, Sequence: seq, Duplicate: true}, true
	}
	return pubAck{}, false
}

// decodeAck reads the acknowledgement of a publish or of a batch's commit:
// one that does not decode, or names no stream, is jetstream.ErrInvalidJSAck
// (with what it was); a refusal is the server's *jetstream.APIError.
func decodeAck(data, prefix []byte, stream string) (pubAck, error) {
	if ack, ok := ackFast(data, prefix, stream); ok {
		return ack, nil
	}
	var ack pubAck
	if err := json.Unmarshal(data, &ack); err != nil || ack.Error == nil && ack.Stream == "" {
		return pubAck{}, fmt.Errorf("%w: %q", jetstream.ErrInvalidJSAck, data)
	}
	if ack.Error != nil {
		return pubAck{}, ack.Error
	}
	return ack, nil
}
