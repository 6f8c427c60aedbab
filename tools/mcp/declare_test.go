package mcp

import (
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/callsheet/callsheet/tool"
)

func bp(b bool) *bool { return &b }

func TestDeclare(t *testing.T) {
	ro := &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: bp(false)}
	idem := &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: bp(false), OpenWorldHint: bp(false)}
	destructive := &sdk.ToolAnnotations{DestructiveHint: bp(true)}
	readOnlyDecl := tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}
	for _, tc := range []struct {
		name    string
		a       *sdk.ToolAnnotations
		trusted bool
		o       Override
		want    tool.Declarations
		labels  []tool.Label
	}{
		{"no annotations, untrusted", nil, false, Override{}, tool.Strictest, []tool.Label{tool.LabelIrreversible, tool.LabelExternal}},
		{"no annotations, trusted", nil, true, Override{}, tool.Strictest, []tool.Label{tool.LabelIrreversible, tool.LabelExternal}},
		{"readOnlyHint untrusted is a label only", ro, false, Override{}, tool.Strictest, nil},
		{"readOnlyHint trusted declares", ro, true, Override{}, readOnlyDecl, nil},
		{"idempotentHint untrusted", idem, false, Override{}, tool.Strictest, nil},
		{"idempotentHint trusted is safe", idem, true, Override{}, tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyExclusive}, nil},
		{"destructive labels", destructive, true, Override{}, tool.Strictest, []tool.Label{tool.LabelIrreversible, tool.LabelExternal}},
		{"override wins over trust", ro, true, Override{Effect: tool.EffectSideEffecting}, tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}, nil},
		{"override on untrusted", nil, false, Override{Effect: tool.EffectReadOnly, Concurrency: tool.ConcurrencyParallelSafe}, tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplayNever, Concurrency: tool.ConcurrencyParallelSafe}, []tool.Label{tool.LabelIrreversible, tool.LabelExternal}},
		{"override labels replace", destructive, false, Override{Labels: []tool.Label{tool.LabelFinancial}, Timeout: time.Second}, tool.Strictest, []tool.Label{tool.LabelFinancial}},
		{"empty override labels clear", destructive, false, Override{Labels: []tool.Label{}}, tool.Strictest, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, labels := Declare(tc.a, tc.trusted, tc.o)
			if d != tc.want {
				t.Errorf("declarations=%+v, want %+v", d, tc.want)
			}
			if !slices.Equal(labels, tc.labels) && !(len(labels) == 0 && len(tc.labels) == 0) {
				t.Errorf("labels=%v, want %v", labels, tc.labels)
			}
		})
	}
}
