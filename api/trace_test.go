package api

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/callsheet/callsheet/node"
)

// TestFleetForwardKeepsTraceparent: a turn posted, with the harness's
// traceparent, to a node that does not own its session is forwarded to the
// owner with the header as it came, and the owner's turn span is the child
// of the harness's span; the node that forwarded makes no turn span.
func TestFleetForwardKeepsTraceparent(t *testing.T) {
	var mu sync.Mutex // the nodes start at once
	spans := map[string]*tracetest.InMemoryExporter{}
	fl := newFleet(t, 2, nil, func(name string, o *node.Options) {
		exp := tracetest.NewInMemoryExporter()
		mu.Lock()
		spans[name] = exp
		mu.Unlock()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		o.TracerProvider = tp
	})
	a, b := fl[0], fl[1]
	code, body := a.do("POST", "/v1/sessions", `{}`)
	if code != 201 {
		t.Fatalf("open on n1: %d %s", code, body)
	}
	var open struct{ Session string }
	_ = json.Unmarshal(body, &open)
	const trace, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	code, body, by := b.served("POST", "/v1/sessions/"+open.Session+"/turns", `{"id": "t1", "calls": [{"id": "c1", "name": "todo_get", "arguments": {}}]}`,
		"traceparent", "00-"+trace+"-"+parent+"-01")
	if code != 200 || by != "n1" {
		t.Fatalf("turn via n2: %d from %q: %s", code, by, body)
	}
	var turns []tracetest.SpanStub
	for _, s := range spans["n1"].GetSpans() {
		if s.Name == "callsheet.turn" {
			turns = append(turns, s)
		}
	}
	if len(turns) != 1 {
		t.Fatalf("n1 made %d turn spans, want 1", len(turns))
	}
	if got := turns[0].Parent; got.TraceID().String() != trace || got.SpanID().String() != parent || !got.IsRemote() {
		t.Fatalf("the owner's turn span has parent %s/%s (remote %v), want the harness's %s/%s", got.TraceID(), got.SpanID(), got.IsRemote(), trace, parent)
	}
	for _, s := range spans["n2"].GetSpans() {
		if s.Name == "callsheet.turn" {
			t.Fatalf("n2, which forwarded the turn, made a turn span too")
		}
	}
}
