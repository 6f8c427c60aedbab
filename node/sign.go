package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/signing"
)

// loadSigningKey loads opts.SigningKey, or makes the default one at first
// start.
func loadSigningKey(opts Options, logger *slog.Logger) (ed25519.PrivateKey, error) {
	if opts.SigningKey == "" {
		path := signing.DefaultKeyPath(opts.DataDir)
		key, created, err := signing.Ensure(path)
		if err != nil {
			return nil, fmt.Errorf("node: signing key: %w", err)
		}
		if created {
			logger.Info("made the signing key; auditors check exports with its public key", "path", path,
				"key_id", events.KeyID(key.Public().(ed25519.PublicKey)), "public_key", signing.PublicKeyPath(path))
		}
		return key, nil
	}
	key, err := signing.Load(opts.SigningKey)
	if err != nil {
		return nil, fmt.Errorf("node: signing key (--signing-key): %w", err)
	}
	return key, nil
}

// SigningKey returns the public half of the key session heads are signed
// with, and its id (events.KeyID).
func (n *Node) SigningKey() (ed25519.PublicKey, string) {
	pub := n.signer.Public().(ed25519.PublicKey)
	return pub, events.KeyID(pub)
}

// Signature is a signed session head: the HeadSigned payload and the Seq of
// the event that records it.
type Signature struct {
	Seq    uint64
	Signed events.HeadSigned
}

// SignSession signs the head of a session, the hash of its latest event,
// with the node's key, and returns once the signature (a HeadSigned event)
// is in the log. When the head is signed already (nothing happened since the
// last signature) it returns that signature and records nothing. by names
// who asked (the authenticated principal). Errors wrap ErrNotFound for a
// session the tenant does not have.
func (n *Node) SignSession(ctx context.Context, tenant, session, by string) (_ Signature, err error) {
	defer code(&err)
	r, err := ask(ctx, n.reg, n.fleet, tenant, session, func(reply chan actors.SignReply) actors.Message {
		return actors.SignHead{By: by, Reply: reply}
	}, func(r actors.SignReply) error { return r.Err })
	if err != nil {
		return Signature{}, err
	}
	if r.Err != nil {
		if errors.Is(r.Err, events.ErrNotFound) {
			return Signature{}, fmt.Errorf("%w: session %q of tenant %q has no events", ErrNotFound, session, tenant)
		}
		return Signature{}, r.Err
	}
	return Signature{Seq: r.Seq, Signed: r.Signed}, nil
}

// closedBy reports whether a log ending with ev is of a closed session: ev
// is its SessionClosed, or the signature made at the close, which follows it.
func closedBy(ev events.Event) bool {
	switch ev.Type {
	case events.TypeSessionClosed:
		return true
	case events.TypeHeadSigned:
		p, err := events.Decode(ev)
		return err == nil && p.(*events.HeadSigned).Reason == events.SignClosed
	}
	return false
}
