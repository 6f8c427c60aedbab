package mcp

import (
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/callsheet/callsheet/tool"
)

// Override is an operator's declaration for one tool of a server (config
// mcp_servers.NAME.tools.TOOL). Empty fields leave the value to the
// annotations (when trusted) or the strictest default.
type Override struct {
	Effect      tool.Effect
	Replay      tool.Replay
	Concurrency tool.Concurrency
	// Labels, when not nil, replace the labels taken from the annotations.
	Labels []tool.Label
	// Timeout, when > 0, is the tool's per-call timeout.
	Timeout time.Duration
}

// Declare returns the declarations and labels of a server's tool from its
// annotations (may be nil), whether the operator trusts the server's
// annotations, and the operator's override (docs/spec.md §7 "MCP"):
//
//   - untrusted (the default): the annotations declare nothing, so every
//     declaration is the strictest (side_effecting, never, exclusive);
//   - trusted: readOnlyHint declares read_only, safe and parallel_safe;
//     otherwise idempotentHint declares safe;
//   - an override's non-empty fields win over both.
//
// Either way the annotations become labels, signals for approvers that gate
// nothing: a tool that is not read-only and whose destructiveHint is true
// (the protocol's default) is labelled irreversible, and one whose
// openWorldHint is true (also the default) external. Override.Labels, when
// set, replaces them. The result is normalized; Declare is pure.
func Declare(a *sdk.ToolAnnotations, trusted bool, o Override) (tool.Declarations, []tool.Label) {
	var d tool.Declarations
	if trusted && a != nil {
		switch {
		case a.ReadOnlyHint:
			d = tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}
		case a.IdempotentHint:
			d.Replay = tool.ReplaySafe
		}
	}
	if o.Effect != "" {
		d.Effect = o.Effect
	}
	if o.Replay != "" {
		d.Replay = o.Replay
	}
	if o.Concurrency != "" {
		d.Concurrency = o.Concurrency
	}
	if o.Labels != nil {
		return d.Normalize(), append([]tool.Label{}, o.Labels...)
	}
	return d.Normalize(), hintLabels(a)
}

// hintLabels turns annotations into labels, with the protocol's defaults for
// hints left out (destructiveHint and openWorldHint default to true).
func hintLabels(a *sdk.ToolAnnotations) []tool.Label {
	readOnly, destructive, openWorld := false, true, true
	if a != nil {
		readOnly = a.ReadOnlyHint
		if a.DestructiveHint != nil {
			destructive = *a.DestructiveHint
		}
		if a.OpenWorldHint != nil {
			openWorld = *a.OpenWorldHint
		}
	}
	var out []tool.Label
	if !readOnly && destructive {
		out = append(out, tool.LabelIrreversible)
	}
	if openWorld {
		out = append(out, tool.LabelExternal)
	}
	return out
}
