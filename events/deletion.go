package events

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// DeletionKind names the form of a deletion receipt and of its tenant's
// deletions log: how a receipt is signed and chained.
const DeletionKind = "callsheet-deletion-1"

// Reasons a session is deleted (Deletion.Reason).
const (
	// DeletedOnRequest: DELETE /v1/sessions/{s}, by the principal named in
	// By.
	DeletedOnRequest = "requested"
	// DeletedByRetention: the tenant's retention passed since the session
	// closed; By is RetentionPrincipal.
	DeletedByRetention = "retention"
)

// RetentionPrincipal is the By of a receipt the retention sweep made; no
// token can name it (a principal has no colon).
const RetentionPrincipal = "retention:sweep"

// Deletion is a receipt in a tenant's deletions log (docs/audit.md,
// "Deletion receipts"): that a session was deleted, by whom, when and why,
// and which log was deleted (its chain rule and its last event's seq and
// hash), signed with the deleting node's key and chained to the tenant's
// receipt before it, so an auditor can tell a session deleted on request
// from one that was lost, and a receipt dropped from the log shows.
//
// The receipt is stored as its canonical encoding (Encode): the bytes
// whose SHA-256 the next receipt's Prev names. The signature signs the
// canonical encoding of the receipt without its "signature" member
// (Message).
type Deletion struct {
	// Kind is DeletionKind.
	Kind string `json:"kind"`
	// Tenant and Session name the deleted session; N is the receipt's
	// position in the tenant's deletions log, from 1; Prev is the hash of
	// the receipt before it (DeletionGenesis for the first).
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	N       uint64 `json:"n"`
	Prev    string `json:"prev"`
	// Deleted is when the node decided the deletion (its clock); By is the
	// authenticated principal who asked, or RetentionPrincipal; Reason is
	// DeletedOnRequest or DeletedByRetention; Node is the node that
	// deleted it.
	Deleted time.Time `json:"deleted"`
	By      string    `json:"by"`
	Reason  string    `json:"reason"`
	Node    string    `json:"node,omitempty"`
	// Chain, LastSeq and LastHash name the log that was deleted: its rule
	// and its last event, as replay --verify would hash it (the session's
	// SessionClosed and HeadSigned are the last events of a session
	// deleted through the API, which closes it first). Opened and Closed
	// are when it was opened and closed.
	Chain    Chain     `json:"chain,omitempty"`
	LastSeq  uint64    `json:"last_seq"`
	LastHash string    `json:"last_hash,omitempty"`
	Opened   time.Time `json:"opened,omitzero"`
	Closed   time.Time `json:"closed,omitzero"`
	// Key is the signing key's id (KeyID), Signature the base64 (standard,
	// padded) ed25519 signature of Message().
	Key       string `json:"key"`
	Signature string `json:"signature,omitempty"`
}

// ErrBadDeletion is wrapped by the errors of ParseDeletion and Verify.
var ErrBadDeletion = errors.New("events: bad deletion receipt")

// DeletionGenesis is the Prev of a tenant's first receipt: the SHA-256 of
// the canonical encoding of {"kind":DeletionKind,"tenant":tenant}, so a
// tenant's deletions log cannot pass for another's.
func DeletionGenesis(tenant string) string {
	b := append([]byte(`{"kind":`), AppendCanonicalString(nil, DeletionKind)...)
	b = append(b, `,"tenant":`...)
	b = AppendCanonicalString(b, tenant)
	b = append(b, '}')
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Message returns the bytes the signature signs: the canonical encoding
// of d without its signature.
func (d Deletion) Message() []byte {
	d.Signature = ""
	b, err := d.canonical()
	if err != nil {
		// Every field is a string, a number or a time: always encodes.
		panic("events: deletion receipt does not encode: " + err.Error())
	}
	return b
}

// Encode returns the receipt as stored: its canonical encoding, signature
// included.
func (d Deletion) Encode() []byte {
	b, err := d.canonical()
	if err != nil {
		panic("events: deletion receipt does not encode: " + err.Error())
	}
	return b
}

func (d Deletion) canonical() ([]byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return Canonical(b)
}

// DeletionHash is the hash a receipt stored as b is linked by: the
// lowercase hex SHA-256 of b (sha256sum of the stored line).
func DeletionHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Sign returns d signed with key: Kind, Key and Signature set.
func (d Deletion) Sign(key ed25519.PrivateKey) Deletion {
	d.Kind = DeletionKind
	d.Key = KeyID(key.Public().(ed25519.PublicKey))
	d.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(key, d.Message()))
	return d
}

// Verify checks d's signature with pub. Its errors wrap ErrBadDeletion and
// say what is wrong: a key id that is not pub's, a signature that is not
// base64 of 64 bytes, or one that does not verify.
func (d Deletion) Verify(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: the public key has %d bytes, want %d", ErrBadDeletion, len(pub), ed25519.PublicKeySize)
	}
	if id := KeyID(pub); d.Key != id {
		return fmt.Errorf("%w: receipt %d (session %s) is signed with key %s, not with the given key %s", ErrBadDeletion, d.N, d.Session, d.Key, id)
	}
	sig, err := base64.StdEncoding.DecodeString(d.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: receipt %d (session %s): the signature is not base64 of %d bytes", ErrBadDeletion, d.N, d.Session, ed25519.SignatureSize)
	}
	if !ed25519.Verify(pub, d.Message(), sig) {
		return fmt.Errorf("%w: receipt %d (session %s): the signature does not verify with key %s", ErrBadDeletion, d.N, d.Session, d.Key)
	}
	return nil
}

// ParseDeletion decodes one stored receipt and checks its shape: its kind,
// tenant, session, a position from 1, a prev link and a last hash of
// HashLen hex digits, a reason, who deleted it, a key and a signature that
// is base64 of 64 bytes. It does not check the signature (Verify) or the
// chain (replay.VerifyDeletions).
func ParseDeletion(b []byte) (Deletion, error) {
	var d Deletion
	if err := json.Unmarshal(b, &d); err != nil {
		return Deletion{}, fmt.Errorf("%w: undecodable: %v", ErrBadDeletion, err)
	}
	sig, err := base64.StdEncoding.DecodeString(d.Signature)
	switch {
	case d.Kind != DeletionKind:
		return Deletion{}, fmt.Errorf("%w: kind %q, want %q", ErrBadDeletion, d.Kind, DeletionKind)
	case d.Tenant == "" || d.Session == "" || d.N == 0:
		return Deletion{}, fmt.Errorf("%w: missing tenant, session or position (tenant=%q session=%q n=%d)", ErrBadDeletion, d.Tenant, d.Session, d.N)
	case len(d.Prev) != HashLen || !isHex(d.Prev):
		return Deletion{}, fmt.Errorf("%w: receipt %d names prev %q, want %d lowercase hex digits", ErrBadDeletion, d.N, d.Prev, HashLen)
	case d.LastHash != "" && (len(d.LastHash) != HashLen || !isHex(d.LastHash)):
		return Deletion{}, fmt.Errorf("%w: receipt %d names last_hash %q, want %d lowercase hex digits", ErrBadDeletion, d.N, d.LastHash, HashLen)
	case d.Reason != DeletedOnRequest && d.Reason != DeletedByRetention:
		return Deletion{}, fmt.Errorf("%w: receipt %d gives reason %q, want %q or %q", ErrBadDeletion, d.N, d.Reason, DeletedOnRequest, DeletedByRetention)
	case d.By == "" || d.Deleted.IsZero():
		return Deletion{}, fmt.Errorf("%w: receipt %d does not say who deleted the session, or when", ErrBadDeletion, d.N)
	case d.Key == "" || err != nil || len(sig) != ed25519.SignatureSize:
		return Deletion{}, fmt.Errorf("%w: receipt %d has no key, or a signature that is not base64 of %d bytes", ErrBadDeletion, d.N, ed25519.SignatureSize)
	}
	return d, nil
}
