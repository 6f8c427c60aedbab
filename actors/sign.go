package actors

import (
	"errors"
	"fmt"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
)

// SignHead asks a session actor to sign its head (docs/audit.md, "Signing
// and exporting a session"). Reply gets the signature once it is durable: a
// new HeadSigned, or the one already recorded when nothing happened since.
type SignHead struct {
	// By names who asked (the authenticated principal).
	By    string
	Reply chan SignReply
}

// SignReply answers SignHead: the signature and the Seq of the HeadSigned
// event that records it.
type SignReply struct {
	Signed events.HeadSigned
	Seq    uint64
	Err    error
}

// ErrNoSigningKey is returned by SignHead when the node has no signing key.
var ErrNoSigningKey = errors.New("actors: this node has no signing key")

func (m SignHead) refuse(err error) { reply(m.Reply, SignReply{Err: err}) }

func (m SignHead) handle(s *Session) { s.onSign(m) }

func (s *Session) onSign(m SignHead) {
	if !s.state.Opened {
		reply(m.Reply, SignReply{Err: fmt.Errorf("%w: session %s was never opened", events.ErrNotFound, s.id)})
		return
	}
	if p, seq, ok := s.state.Signed(); ok {
		// Nothing since the last signature: answer it once it is durable.
		s.watch(func() bool {
			if !s.out.isDurable(seq) {
				return false
			}
			reply(m.Reply, SignReply{Signed: p, Seq: seq})
			return true
		}, m.refuse)
		return
	}
	ok, err := s.signHead(events.SignRequested, m.By, func(p events.HeadSigned, seq uint64) {
		reply(m.Reply, SignReply{Signed: p, Seq: seq})
	}, func(err error) { reply(m.Reply, SignReply{Err: err}) })
	if err != nil || !ok {
		reply(m.Reply, SignReply{Err: err})
	}
}

// signHead decides a signature of the head (core.Sign), signed with the
// node's key, and queues it; after (given the signature and the Seq of its
// event) and fail are as decide's, and may be nil. It reports false when it
// signed nothing: no key (with ErrNoSigningKey), or the head was signed
// already.
func (s *Session) signHead(reason, by string, after func(events.HeadSigned, uint64), fail func(error)) (bool, error) {
	if s.deps.SigningKey == nil {
		return false, fmt.Errorf("%w: give it one (node.Options.SigningKey, cmd/callsheet-node --signing-key)", ErrNoSigningKey)
	}
	drafts, err := core.Sign(s.state, reason, by)
	if err != nil || len(drafts) == 0 {
		return false, err
	}
	p := drafts[0].Payload.(events.HeadSigned)
	signed := s.state.Chain().SignHead(s.deps.SigningKey, s.tenant, s.id, p.Seq, p.Hash, p.Reason, p.By)
	drafts[0].Payload = signed
	seq := s.state.Seq + 1
	var done func()
	if after != nil {
		done = func() { after(signed, seq) }
	}
	s.decide(drafts, done, fail)
	return true, nil
}
