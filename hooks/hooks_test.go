package hooks

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
)

func TestParseVerdict(t *testing.T) {
	for _, c := range []struct {
		in, action string
		wantErr    bool
	}{
		{"", "allow", false}, {`{"action":"allow"}`, "allow", false}, {`{"action":"deny","reason":"no"}`, "deny", false},
		{`{"action":"rewrite","arguments":{"a":1}}`, "rewrite", false}, {`{"action":"rewrite"}`, "", true},
		{`{"action":"maybe"}`, "", true}, {`{"action":"allow","extra":1}`, "", true}, {`not json`, "", true},
	} {
		v, err := ParseVerdict([]byte(c.in))
		if (err != nil) != c.wantErr || (!c.wantErr && v.Action != c.action) {
			t.Errorf("ParseVerdict(%q) = %+v, %v", c.in, v, err)
		}
	}
}

func FuzzParseVerdict(f *testing.F) {
	f.Add([]byte(`{"action":"deny","reason":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseVerdict(b)
		if err == nil && v.Action != "allow" && v.Action != "deny" && v.Action != "rewrite" {
			t.Fatalf("accepted action %q", v.Action)
		}
	})
}

func TestCommandHooksSeeTheCallOnStdin(t *testing.T) {
	c := Call{Tenant: "t", Session: "s", Turn: "1", Call: "c", Tool: "shell", Arguments: json.RawMessage(`{"command":"ls"}`)}
	ok := CommandBefore("ok", []string{"sh", "-c", `grep -q '"tool":"shell"'`}, nil, 0)
	if err := ok.Run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	bad := CommandBefore("bad", []string{"sh", "-c", "echo nope >&2; exit 3"}, nil, 0)
	if err := bad.Run(context.Background(), c); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("err=%v, want the hook's stderr", err)
	}
	mw := CommandMiddleware("mw", []string{"sh", "-c", `echo '{"action":"rewrite","arguments":{"command":"ls -la"}}'`}, nil, 0)
	v, err := mw.Run(context.Background(), c)
	if err != nil || v.Action != "rewrite" || string(v.Arguments) != `{"command":"ls -la"}` {
		t.Fatalf("verdict %+v %v", v, err)
	}
	after := CommandAfter("after", []string{"sh", "-c", `grep -q '"outcome":"ok"'`}, nil, 0)
	if err := after.Run(context.Background(), c, events.Result{Outcome: events.OutcomeOK}); err != nil {
		t.Fatal(err)
	}
	if !Applies([]string{"sh*"}, "shell") || Applies([]string{"read"}, "shell") || !Applies(nil, "x") {
		t.Fatal("Applies globs wrong")
	}
}
