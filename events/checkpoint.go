package events

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

// Checkpoint is a signed head of a session kept outside the session's log
// (docs/audit.md, "Checkpoints and the witness"): while a session is active
// its node signs its head at least every second and every few events, and
// keeps the signature in a per-tenant store (and a witness, replay
// --witness, in a file away from NATS), so a log cut after the head a
// checkpoint names shows. It signs the same bytes as a HeadSigned
// (Chain.HeadMessage), and is no event of the session: the log, its counts
// and its transcript are as they were.
type Checkpoint struct {
	// Chain is the rule the session is linked by, Tenant and Session name
	// it; Seq and Hash name its head: its last durable event and that
	// event's hash.
	Chain   Chain  `json:"chain"`
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	Seq     uint64 `json:"seq"`
	Hash    string `json:"hash"`
	// Time is the head event's recorded time; Signed when the node signed
	// it (its clock), and Node which node.
	Time   time.Time `json:"time"`
	Signed time.Time `json:"signed"`
	Node   string    `json:"node,omitempty"`
	// Closed says the head is the session's close (its SessionClosed, or
	// the HeadSigned of it): nothing follows it.
	Closed bool `json:"closed,omitempty"`
	// IntervalMS and Every are the signing node's cadence: the longest an
	// active session's durable head waits to be signed, in milliseconds,
	// and how many events make a checkpoint due sooner. They bound what a
	// cut after the checkpoint's head could remove unseen.
	IntervalMS int64 `json:"interval_ms,omitempty"`
	Every      int   `json:"every,omitempty"`
	// Key is the signing key's id (KeyID), Signature the base64 (standard,
	// padded) ed25519 signature of Chain.HeadMessage(Tenant, Session, Seq,
	// Hash).
	Key       string `json:"key"`
	Signature string `json:"signature"`
}

// SignCheckpoint signs cp's head (its Chain, Tenant, Session, Seq and Hash)
// with key and returns cp with Key and Signature set.
func SignCheckpoint(key ed25519.PrivateKey, cp Checkpoint) Checkpoint {
	s := cp.Chain.SignHead(key, cp.Tenant, cp.Session, cp.Seq, cp.Hash, "", "")
	cp.Key, cp.Signature = s.Key, s.Signature
	return cp
}

// Verify checks the checkpoint's signature with pub (Chain.VerifyHead). Its
// errors wrap ErrBadSignature, or ErrUnknownChain.
func (cp Checkpoint) Verify(pub ed25519.PublicKey) error {
	if cp.Chain != Chain1 && cp.Chain != Chain2 {
		return fmt.Errorf("%w %q", ErrUnknownChain, string(cp.Chain))
	}
	return cp.Chain.VerifyHead(pub, cp.Tenant, cp.Session, HeadSigned{Seq: cp.Seq, Hash: cp.Hash, Key: cp.Key, Signature: cp.Signature})
}

// ParseCheckpoint decodes one checkpoint (a line of a witness file, a value
// of the checkpoint store) and checks its shape: a chain rule, tenant,
// session, a seq from 1, a hash of HashLen hex digits, a key and a
// signature that is base64 of 64 bytes. It does not check the signature
// (Verify).
func ParseCheckpoint(b []byte) (Checkpoint, error) {
	var cp Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return Checkpoint{}, fmt.Errorf("events: undecodable checkpoint: %w", err)
	}
	sig, err := base64.StdEncoding.DecodeString(cp.Signature)
	switch {
	case cp.Chain != Chain1 && cp.Chain != Chain2:
		return Checkpoint{}, fmt.Errorf("events: checkpoint names chain rule %q, want %s or %s", cp.Chain, Chain2, Chain1)
	case cp.Tenant == "" || cp.Session == "" || cp.Seq == 0:
		return Checkpoint{}, fmt.Errorf("events: checkpoint is missing tenant, session or seq (tenant=%q session=%q seq=%d)", cp.Tenant, cp.Session, cp.Seq)
	case len(cp.Hash) != HashLen || !isHex(cp.Hash):
		return Checkpoint{}, fmt.Errorf("events: checkpoint of seq %d names hash %q, want %d lowercase hex digits", cp.Seq, cp.Hash, HashLen)
	case cp.Key == "" || err != nil || len(sig) != ed25519.SignatureSize:
		return Checkpoint{}, fmt.Errorf("events: checkpoint of seq %d has no key, or a signature that is not base64 of %d bytes", cp.Seq, ed25519.SignatureSize)
	}
	return cp, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
