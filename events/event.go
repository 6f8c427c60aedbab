package events

import (
	"encoding/json"
	"time"
)

// Event is one past-tense fact in a session's log. Every field is fixed when
// the event is decided (ids and times are minted by the shell, never by the
// pure core) so a replay folds exactly what happened.
type Event struct {
	// ID is a ULID; it is also the JetStream message id, so a re-sent event
	// is stored once.
	ID      string `json:"id"`
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	// Seq is the event's position in its session, from 1, without gaps.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Type Type      `json:"type"`
	// Causation is the id of the event (or the request key) that caused it.
	Causation string `json:"causation,omitempty"`
	// Prev is the hash of the session's previous event (Hash), or for the
	// first event the session's Genesis link: the hash chain of
	// docs/events.md. Empty in events written before the chain.
	Prev string          `json:"prev,omitempty"`
	Data json.RawMessage `json:"data"`

	// enc is the event's encoding when Encode made it (encode.go): what
	// Marshal returns while the fields above are as they were.
	enc *encoded
}

// Type is an event's stable type string.
type Type string

// Event types. Names are the contract of docs/spec.md §4; payloads are below.
const (
	TypeSessionOpened         Type = "SessionOpened"
	TypeTurnReceived          Type = "TurnReceived"
	TypeTurnOpened            Type = "TurnOpened"
	TypeCallsAdded            Type = "CallsAdded"
	TypeTurnEnded             Type = "TurnEnded"
	TypeToolCallRequested     Type = "ToolCallRequested"
	TypeDispatchBlocked       Type = "DispatchBlocked"
	TypeApprovalRequested     Type = "ApprovalRequested"
	TypeApprovalGranted       Type = "ApprovalGranted"
	TypeApprovalDenied        Type = "ApprovalDenied"
	TypeToolCallStarted       Type = "ToolCallStarted"
	TypeFileCheckpointed      Type = "FileCheckpointed"
	TypeToolCallCompleted     Type = "ToolCallCompleted"
	TypeToolCallFailed        Type = "ToolCallFailed"
	TypeToolCallIndeterminate Type = "ToolCallIndeterminate"
	TypeRetryScheduled        Type = "RetryScheduled"
	TypeResultCommitted       Type = "ResultCommitted"
	TypeTurnCompleted         Type = "TurnCompleted"
	TypeRetryNoticeIssued     Type = "RetryNoticeIssued"
	TypeSessionClosed         Type = "SessionClosed"
	TypeCallCancelled         Type = "CallCancelled"
	TypeAnswerReceived        Type = "AnswerReceived"
	TypeWorkStateUpdated      Type = "WorkStateUpdated"
	TypeWorkspaceRewound      Type = "WorkspaceRewound"
	TypeOwnershipTaken        Type = "OwnershipTaken"
	TypeOwnershipReleased     Type = "OwnershipReleased"
)

// Outcome is a committed call's outcome.
type Outcome string

// The four outcomes of docs/spec.md §2.4.
const (
	OutcomeOK            Outcome = "ok"
	OutcomeError         Outcome = "error"
	OutcomeBlocked       Outcome = "blocked"
	OutcomeIndeterminate Outcome = "indeterminate"
)

// Block is the category of a blocked call.
type Block string

// The three blocked categories: nothing ran in any of them.
const (
	BlockInvalidArguments Block = "invalid_arguments"
	BlockUnavailable      Block = "unavailable"
	BlockDenied           Block = "denied"
)

// Part is one piece of result content, as the API and transcript show it.
type Part struct {
	Type string          `json:"type"`
	Text string          `json:"text,omitempty"`
	JSON json.RawMessage `json:"json,omitempty"`
	MIME string          `json:"mime,omitempty"`
	Data []byte          `json:"data,omitempty"`
}

// OutputRef names a full output kept in the object store when a result was
// cut to the output caps.
type OutputRef struct {
	Store  string `json:"store"`
	Object string `json:"object"`
	Bytes  int64  `json:"bytes"`
	Lines  int    `json:"lines"`
}

// Result is a committed result, exactly as the API returns it.
type Result struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Outcome    Outcome    `json:"outcome"`
	Block      Block      `json:"block,omitempty"`
	Content    []Part     `json:"content"`
	Truncated  bool       `json:"truncated"`
	FullOutput *OutputRef `json:"full_output,omitempty"`
	Attempts   int        `json:"attempts"`
	// Touched lists the files the call touched (mutated or read), relative
	// to the workspace, when the tool declares them.
	Touched []string `json:"touched,omitempty"`
}

// CallSpec is one call as the model gave it.
type CallSpec struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is the raw arguments: a JSON object or a JSON string holding
	// one, as providers send it. It is recorded verbatim.
	Arguments json.RawMessage `json:"arguments"`
}
