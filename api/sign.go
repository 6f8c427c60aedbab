package api

import (
	"encoding/base64"
	"net/http"

	"github.com/callsheet/callsheet/events"
)

// SignAnswer is the answer of POST /v1/sessions/{s}/sign: the session's
// head, signed (docs/audit.md, "Signing and exporting a session").
type SignAnswer struct {
	Session string `json:"session"`
	// Seq is the sequence of the HeadSigned event that records the
	// signature; Signed is its payload: the signed event's seq and hash,
	// the key id, the signature, why and by whom.
	Seq    uint64            `json:"seq"`
	Signed events.HeadSigned `json:"signed"`
	// PublicKey is the base64 of the node's 32-byte ed25519 public key.
	// Check its id against a key you got from the operator
	// (DATA/credentials/signing.pub): a key served with the signature
	// proves nothing by itself.
	PublicKey string `json:"public_key"`
}

// signRequest is the body of POST /v1/sessions/{s}/sign: nothing (an empty
// body or {}).
type signRequest struct{}

// signSession signs the session's head, or answers the signature already
// recorded when nothing happened since.
func (s *Server) signSession(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req signRequest
	if err := decodeBody(w, r, s.bodyLimit(r), &req, true); err != nil {
		return err
	}
	sig, err := s.node.SignSession(r.Context(), tenant, r.PathValue("s"), principal(r))
	if err != nil {
		return err
	}
	pub, _ := s.node.SigningKey()
	writeJSON(w, http.StatusOK, SignAnswer{Session: r.PathValue("s"), Seq: sig.Seq, Signed: sig.Signed, PublicKey: base64.StdEncoding.EncodeToString(pub)})
	return nil
}
