package core

import (
	"fmt"

	"github.com/callsheet/callsheet/events"
)

// Sign decides a signature of the session's head (docs/audit.md, "Signing
// and exporting a session"): a HeadSigned draft naming the last event by its
// Seq and its hash (Session.Head), with reason and by, for the shell to sign
// with its key (the draft's Key and Signature are empty: a key is the
// shell's, as ids and times are). It decides nothing for a session without
// events, or whose last event is already a HeadSigned: the head is signed
// (Signed names that signature).
func Sign(s *Session, reason, by string) ([]Draft, error) {
	if s.Seq == 0 {
		return nil, fmt.Errorf("%w: session %s has no events to sign", events.ErrNotFound, s.ID)
	}
	if s.last.Type == events.TypeHeadSigned {
		return nil, nil
	}
	head, err := s.Head()
	if err != nil {
		return nil, err
	}
	return []Draft{{Type: events.TypeHeadSigned, Payload: events.HeadSigned{Seq: s.Seq, Hash: head, Reason: reason, By: by}}}, nil
}

// Signed returns the session's latest HeadSigned and its Seq; ok is false
// when the head has not been signed since its last event, that is when the
// last event is not a HeadSigned.
func (s *Session) Signed() (p events.HeadSigned, seq uint64, ok bool) {
	if s.Seq == 0 || s.last.Type != events.TypeHeadSigned || s.signedSeq != s.Seq {
		return events.HeadSigned{}, 0, false
	}
	return s.signed, s.signedSeq, true
}
