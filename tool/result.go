package tool

import (
	"context"
	"encoding/json"
)

// Part is one piece of a result: text, JSON or an image. Rendering belongs to
// the surface; tools return structured parts.
type Part struct {
	Type string          `json:"type"`
	Text string          `json:"text,omitempty"`
	JSON json.RawMessage `json:"json,omitempty"`
	MIME string          `json:"mime,omitempty"`
	// Data is the base64-encoded image (encoding/json encodes []byte so).
	Data []byte `json:"data,omitempty"`
}

// Part types.
const (
	PartText  = "text"
	PartJSON  = "json"
	PartImage = "image"
)

// Result is what a tool returns on success.
type Result struct {
	Parts []Part
	// State, when set, is recorded as durable session state with the
	// call's completion (see StateUpdate).
	State *StateUpdate
	// Full, when set, is the whole output Parts show the start of, kept
	// outside memory (see Output). The runtime closes it.
	Full Output
}

// Text returns a result with one text part.
func Text(s string) Result { return Result{Parts: []Part{{Type: PartText, Text: s}}} }

// JSON returns a result with one JSON part holding v, or an error if v does
// not marshal.
func JSON(v any) (Result, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Result{}, err
	}
	return Result{Parts: []Part{{Type: PartJSON, JSON: b}}}, nil
}

// Image returns a result with one image part.
func Image(mime string, data []byte) Result {
	return Result{Parts: []Part{{Type: PartImage, MIME: mime, Data: data}}}
}

// Call describes the call a tool is running; tools read it with CallFrom.
type Call struct {
	Tenant  string
	Session string
	Turn    string
	// ID is the model's call id.
	ID string
	// Index is the call's position in its turn.
	Index int
	// Attempt counts from 1.
	Attempt int
	// IdempotencyKey is minted by the runtime from tenant, session, turn and
	// call index: stable across attempts and restarts, so an external side
	// effect can be de-duplicated downstream.
	IdempotencyKey string
	// Workspace is the absolute path of the session's workspace.
	Workspace string
	// Escalate is true when the call asked to run outside the sandbox.
	Escalate bool
	// MaxOutput is how many bytes of output the runtime keeps for this call
	// (the config's limits.output_bytes_per_call); a tool that spills its
	// output stops keeping bytes past it and says so. 0 means
	// DefaultMaxOutput.
	MaxOutput int64
	// SpillDir is where a tool may spill output too large for memory (a
	// directory only the node uses); "" means os.TempDir().
	SpillDir string
}

type callKey struct{}

// WithCall returns ctx carrying c.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the call ctx carries, if any.
func CallFrom(ctx context.Context) (Call, bool) {
	c, ok := ctx.Value(callKey{}).(Call)
	return c, ok
}

// Claim records the claim of a call a tool that ClaimsWhenTaken runs,
// naming the external worker that took it; a nil error means the claim is
// durable and the call may go to the worker, any other that it may not run
// (another attempt was claimed, the session moved): the tool hands nothing
// over and returns.
type Claim func(worker string) error

type claimKey struct{}

// WithClaim returns ctx carrying claim.
func WithClaim(ctx context.Context, claim Claim) context.Context {
	return context.WithValue(ctx, claimKey{}, claim)
}

// ClaimFrom returns the claim function ctx carries, if any.
func ClaimFrom(ctx context.Context) (Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(Claim)
	return c, ok && c != nil
}
