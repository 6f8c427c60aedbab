package api

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/tool"
)

// FuzzDecodeToolSpec: a registration body (PUT /v1/tools/{name}) is decoded
// strictly and checked as a tool: never a panic, every refusal a message;
// an accepted one survives the trip through the registrations bucket (its
// JSON, decoded again) unchanged and accepted.
func FuzzDecodeToolSpec(f *testing.F) {
	for _, s := range []string{
		spec(""),
		spec(`, "effect": "read_only", "replay": "safe", "concurrency": "parallel_safe", "timeout": "10s", "heartbeat_timeout": "2s"`),
		spec(`, "timeout": 1500, "labels": ["financial"]`),
		spec(`, "effect": "harmless"`),
		spec(`, "timeout": "-1s"`),
		`{"description": "d", "guidelines": ["g"], "input_schema": {"type": "object", "properties": {"a": {"$ref": "#/x"}}}}`,
		`{"description": "d", "guidelines": ["g"], "input_schema": {"type": "nope"}}`,
		`{"description": "d", "guidelines": [], "input_schema": {}}`,
		`{"description": 1}`, `{}`, `[`, `null`, `{"input_schema": null}`,
	} {
		f.Add([]byte(s))
	}
	reg, _ := tool.NewRegistry()
	runner := harness.Runner(nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		var sp harness.Spec
		if err := decodeJSON(b, &sp); err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error for %q", b)
			}
			return
		}
		verdict := func(sp harness.Spec) error {
			if err := sp.Check(); err != nil {
				return err
			}
			return reg.CheckFor("acme", sp.Tool("acme", "fuzzed", runner))
		}
		err := verdict(sp)
		if err != nil {
			var re *tool.RegistrationError
			if !errors.Is(err, harness.ErrInvalidSpec) && !errors.As(err, &re) || err.Error() == "" {
				t.Fatalf("refusal of %q: %v, want ErrInvalidSpec or a *tool.RegistrationError with a message", b, err)
			}
			return
		}
		stored, merr := json.Marshal(sp)
		if merr != nil {
			t.Fatalf("accepted spec does not encode: %v", merr)
		}
		var back harness.Spec
		if err := decodeJSON(stored, &back); err != nil {
			t.Fatalf("stored form %s does not decode: %v", stored, err)
		}
		if !reflect.DeepEqual(normalize(back), normalize(sp)) {
			t.Fatalf("stored form changed the spec:\n%+v\n%+v", back, sp)
		}
		if err := verdict(back); err != nil {
			t.Fatalf("stored form refused: %v", err)
		}
	})
}

// normalize compacts the schema, which the stored form re-indents.
func normalize(sp harness.Spec) harness.Spec {
	var v any
	if json.Unmarshal(sp.InputSchema, &v) == nil {
		sp.InputSchema, _ = json.Marshal(v)
	}
	return sp
}

// FuzzDecodePoll: a poll body is decoded strictly and checked; an accepted
// one names only tool names that cannot widen a NATS subject.
func FuzzDecodePoll(f *testing.F) {
	for _, s := range []string{
		`{"worker": "w", "tools": ["a"], "max": 2, "wait_ms": 1000}`,
		`{"worker": "w", "tools": ["a.>"], "wait_ms": 0}`,
		`{"worker": "w", "tools": ["*"]}`,
		`{"worker": "", "tools": []}`,
		`{"worker": "w", "tools": ["a"], "wait_ms": 600000}`,
		`{"worker": "w", "tools": ["a"], "max": -1}`,
		`{"tools": "a"}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req pollRequest
		if err := decodeJSON(b, &req); err != nil {
			return
		}
		p := harness.PollRequest{Worker: req.Worker, Tools: req.Tools, Max: req.Max, Wait: time.Duration(req.WaitMS) * time.Millisecond}
		if err := p.Check(); err != nil {
			if !errors.Is(err, harness.ErrInvalid) {
				t.Fatalf("refusal %v does not match harness.ErrInvalid", err)
			}
			return
		}
		for _, name := range p.Tools {
			if strings.ContainsAny(name, ".*> \t\r\n") || name == "" {
				t.Fatalf("poll accepted tool name %q, which would widen or break a NATS subject", name)
			}
		}
	})
}

// FuzzDecodeComplete: a complete body is decoded strictly and its parts
// checked; an accepted result's parts are each one of the three shapes.
func FuzzDecodeComplete(f *testing.F) {
	for _, s := range []string{
		`{"content": [{"type": "text", "text": "hi"}]}`,
		`{"content": [{"type": "json", "json": {"a": [1, 2]}}, {"type": "image", "mime": "image/png", "data": "iVBORw0KGgo="}]}`,
		`{"content": []}`,
		`{"content": [{"type": "json"}]}`,
		`{"content": [{"type": "image", "mime": "text/html", "data": "PGI+"}]}`,
		`{"content": [{"type": "video"}]}`,
		`{"content": [{"type": "image", "data": "!!"}]}`,
		`{"content": null}`, `{}`, `{"content": "x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req completeRequest
		if err := decodeJSON(b, &req); err != nil || req.Content == nil {
			return
		}
		if err := harness.CheckParts(*req.Content); err != nil {
			if !errors.Is(err, harness.ErrInvalid) || err.Error() == "" {
				t.Fatalf("refusal %v: want harness.ErrInvalid with a message", err)
			}
			return
		}
		for _, p := range *req.Content {
			switch p.Type {
			case tool.PartText:
			case tool.PartJSON:
				if !json.Valid(p.JSON) {
					t.Fatalf("accepted invalid JSON part %q", p.JSON)
				}
			case tool.PartImage:
				if len(p.Data) == 0 || p.MIME == "" {
					t.Fatalf("accepted an image part without data or mime: %+v", p)
				}
			default:
				t.Fatalf("accepted part type %q", p.Type)
			}
		}
	})
}

// FuzzDecodeAnswerNext: a complete or fail with "next" is decoded strictly;
// a next that passes the poll's checks names only tool names that cannot
// widen or break a NATS subject, and its wait is within bounds; a refusal
// is a 400 with a message naming "next".
func FuzzDecodeAnswerNext(f *testing.F) {
	for _, s := range []string{
		`{"content": [], "next": {"worker": "w", "tools": ["a"], "max": 1, "wait_ms": 30000}}`,
		`{"error": "x", "next": {"worker": "w", "tools": ["a", "b"]}}`,
		`{"content": [], "next": {"worker": "w", "tools": ["a.>"], "wait_ms": 60001}}`,
		`{"content": [], "next": {"worker": "w", "tools": ["a"], "tools": ["b"]}}`,
		`{"content": [], "next": {"worker": "w", "tools": ["a"], "tenant": "t"}}`,
		`{"content": [], "next": null}`, `{"content": [], "next": []}`, `{"next": {}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c completeRequest
		var fr failRequest
		errC, errF := decodeJSON(b, &c), decodeJSON(b, &fr)
		for _, next := range []*pollRequest{c.Next, fr.Next} {
			if next == nil {
				continue
			}
			p, err := next.poll("next.")
			if err != nil {
				if e, ok := err.(*Error); !ok || e.Status != 400 || !strings.Contains(e.Message, "next.wait_ms") {
					t.Fatalf("refusal %v: want a 400 naming next.wait_ms", err)
				}
				continue
			}
			if p.Wait < 0 || p.Wait > harness.MaxWait {
				t.Fatalf("next accepted wait %s", p.Wait)
			}
			if p.Check() != nil {
				continue
			}
			for _, name := range p.Tools {
				if strings.ContainsAny(name, ".*> \t\r\n") || name == "" {
					t.Fatalf("next accepted tool name %q, which would widen or break a NATS subject", name)
				}
			}
		}
		_, _ = errC, errF
	})
}
