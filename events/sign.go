package events

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// TypeHeadSigned records a signature of the session's head: the hash of its
// latest event, signed with the node's ed25519 key (docs/audit.md, "Signing
// and exporting a session"). The event itself follows the event it signs,
// so it is chained like any other.
const TypeHeadSigned Type = "HeadSigned"

// Reasons a head is signed.
const (
	// SignClosed: the session was closed (signed in the append that records
	// SessionClosed).
	SignClosed = "closed"
	// SignRequested: POST /v1/sessions/{s}/sign, or node.SignSession.
	SignRequested = "requested"
)

// HeadSigned is the payload of TypeHeadSigned: which event it signs, by its
// sequence and hash, with which key, and the signature.
type HeadSigned struct {
	// Seq and Hash name the signed event: the event before this one.
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// Key is the signing key's id (KeyID): which public key checks it.
	Key string `json:"key"`
	// Signature is the base64 (standard, padded) ed25519 signature of
	// HeadMessage(tenant, session, Seq, Hash).
	Signature string `json:"signature"`
	// Reason is SignClosed or SignRequested; By names who asked, for a
	// request (the authenticated principal, as approvals record it).
	Reason string `json:"reason"`
	By     string `json:"by,omitempty"`
}

// ErrBadSignature is wrapped by VerifyHead's errors.
var ErrBadSignature = errors.New("events: bad head signature")

// HeadMessage returns the bytes a head signature signs under ChainVersion;
// see Chain.HeadMessage.
func HeadMessage(tenant, session string, seq uint64, hash string) []byte {
	return ChainVersion.HeadMessage(tenant, session, seq, hash)
}

// HeadMessage returns the bytes a head signature of a session chained by c
// signs: the canonical encoding (canon.go; every member here is plain ASCII
// or an integer, so it is RFC 8785's) of
//
//	{"chain":c,"hash":hash,"seq":seq,"session":session,"tenant":tenant}
//
// so a signature names its chain rule, tenant, session, position and hash,
// and cannot be moved to another session or read under another rule.
func (c Chain) HeadMessage(tenant, session string, seq uint64, hash string) []byte {
	b := make([]byte, 0, 128+len(tenant)+len(session)+len(hash))
	b = append(b, `{"chain":`...)
	b = AppendCanonicalString(b, string(c))
	b = append(b, `,"hash":`...)
	b = AppendCanonicalString(b, hash)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"session":`...)
	b = AppendCanonicalString(b, session)
	b = append(b, `,"tenant":`...)
	b = AppendCanonicalString(b, tenant)
	return append(b, '}')
}

// KeyID names a public key: the lowercase hex SHA-256 of its 32 bytes.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}

// SignHead signs under ChainVersion; see Chain.SignHead.
func SignHead(key ed25519.PrivateKey, tenant, session string, seq uint64, hash, reason, by string) HeadSigned {
	return ChainVersion.SignHead(key, tenant, session, seq, hash, reason, by)
}

// SignHead signs the head (seq, hash) of a session chained by c with key and
// returns the payload to record. reason and by are recorded as given.
func (c Chain) SignHead(key ed25519.PrivateKey, tenant, session string, seq uint64, hash, reason, by string) HeadSigned {
	sig := ed25519.Sign(key, c.HeadMessage(tenant, session, seq, hash))
	return HeadSigned{
		Seq: seq, Hash: hash, Key: KeyID(key.Public().(ed25519.PublicKey)),
		Signature: base64.StdEncoding.EncodeToString(sig), Reason: reason, By: by,
	}
}

// VerifyHead checks under ChainVersion; see Chain.VerifyHead.
func VerifyHead(pub ed25519.PublicKey, tenant, session string, p HeadSigned) error {
	return ChainVersion.VerifyHead(pub, tenant, session, p)
}

// VerifyHead checks p's signature of the head of tenant's session, chained
// by c, with pub.
// It returns an error wrapping ErrBadSignature that says what is wrong: a
// key id that is not pub's, a signature that is not base64 of 64 bytes, or
// one that does not verify. It does not check that p.Hash is the hash of the
// event at p.Seq: that is the chain's part (replay.Verify).
func (c Chain) VerifyHead(pub ed25519.PublicKey, tenant, session string, p HeadSigned) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: the public key has %d bytes, want %d", ErrBadSignature, len(pub), ed25519.PublicKeySize)
	}
	if id := KeyID(pub); p.Key != id {
		return fmt.Errorf("%w: signed with key %s, not with the given key %s", ErrBadSignature, p.Key, id)
	}
	sig, err := base64.StdEncoding.DecodeString(p.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: the signature is not base64 of %d bytes", ErrBadSignature, ed25519.SignatureSize)
	}
	if !ed25519.Verify(pub, c.HeadMessage(tenant, session, p.Seq, p.Hash), sig) {
		return fmt.Errorf("%w: the signature of seq %d (hash %s) does not verify with key %s", ErrBadSignature, p.Seq, p.Hash, p.Key)
	}
	return nil
}
