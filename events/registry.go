package events

import (
	"fmt"
	"reflect"
)

// The event-type registry: every event type and its payload's Go type, in
// the order docs/events.md describes them. It is the one list of the event
// types: decoding (Decode, DecodeInto), the generated encoders
// (events/internal/gen), the audit model behind the timeline (Known) and
// the test that holds docs/events.md to it all read it. A type is added
// here and nowhere else (hallgren/eventsourcing's Register).
var registry = []registration{
	register[SessionOpened](TypeSessionOpened),
	register[TurnReceived](TypeTurnReceived),
	register[TurnOpened](TypeTurnOpened),
	register[CallsAdded](TypeCallsAdded),
	register[TurnEnded](TypeTurnEnded),
	register[RetryNoticeIssued](TypeRetryNoticeIssued),
	register[DispatchBlocked](TypeDispatchBlocked),
	register[ApprovalRequested](TypeApprovalRequested),
	register[ApprovalGranted](TypeApprovalGranted),
	register[ApprovalDenied](TypeApprovalDenied),
	register[ToolCallRequested](TypeToolCallRequested),
	register[FileCheckpointed](TypeFileCheckpointed),
	register[ToolCallStarted](TypeToolCallStarted),
	register[WorkStateUpdated](TypeWorkStateUpdated),
	register[ToolCallCompleted](TypeToolCallCompleted),
	register[ToolCallFailed](TypeToolCallFailed),
	register[RetryScheduled](TypeRetryScheduled),
	register[ToolCallIndeterminate](TypeToolCallIndeterminate),
	register[ResultCommitted](TypeResultCommitted),
	register[TurnCompleted](TypeTurnCompleted),
	register[CallCancelled](TypeCallCancelled),
	register[AnswerReceived](TypeAnswerReceived),
	register[WorkspaceRewound](TypeWorkspaceRewound),
	register[SessionClosed](TypeSessionClosed),
	register[HeadSigned](TypeHeadSigned),
	register[OwnershipTaken](TypeOwnershipTaken),
	register[OwnershipReleased](TypeOwnershipReleased),
}

// registration is one event type of the registry.
type registration struct {
	typ Type
	// payload is the payload's struct type; fresh returns a pointer to a
	// zero one, as Decode returns it.
	payload reflect.Type
	fresh   func() any
}

func register[P any](t Type) registration {
	return registration{typ: t, payload: reflect.TypeFor[P](), fresh: func() any { return new(P) }}
}

// byType indexes the registry.
var byType = func() map[Type]registration {
	m := make(map[Type]registration, len(registry))
	for _, r := range registry {
		if _, dup := m[r.typ]; dup {
			panic(fmt.Sprintf("events: type %s registered twice", r.typ))
		}
		m[r.typ] = r
	}
	return m
}()

// Types returns every event type, in the order docs/events.md gives them.
func Types() []Type {
	out := make([]Type, len(registry))
	for i, r := range registry {
		out[i] = r.typ
	}
	return out
}

// Known reports whether t is a registered event type.
func Known(t Type) bool {
	_, ok := byType[t]
	return ok
}

// PayloadType returns the struct type of t's payload (not a pointer), and
// false for an unknown type.
func PayloadType(t Type) (reflect.Type, bool) {
	r, ok := byType[t]
	return r.payload, ok
}

// newPayload returns a pointer to a fresh payload of ev.Type's Go type.
func newPayload(ev Event) (any, error) {
	r, ok := byType[ev.Type]
	if !ok {
		return nil, fmt.Errorf("events: event %s (seq %d) has unknown type %q", ev.ID, ev.Seq, ev.Type)
	}
	return r.fresh(), nil
}
