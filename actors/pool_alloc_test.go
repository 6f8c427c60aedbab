package actors

import (
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/israce"
	"github.com/callsheet/callsheet/tool"
)

// TestNamingARunningCallAllocatesNothing: the pool names every call it
// runs, and is asked about running calls, by tenant, session, turn and
// index; naming one allocates nothing.
func TestNamingARunningCallAllocatesNothing(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	var p Pool
	ref := events.CallRef{Turn: "01JTURN0000000000000000000", Call: "c1", Index: 300}
	if got := testing.AllocsPerRun(100, func() { p.Running("default", "01JSESSION00000000000000000", ref) }); got != 0 {
		t.Fatalf("asking whether a call runs allocates %v times, want 0", got)
	}
}

// TestAwaitingAReplyAllocatesNothing: every call waits for its session's
// answers (its claim, its outcome) bounded by claimTimeout; bounding the
// wait allocates nothing.
func TestAwaitingAReplyAllocatesNothing(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	done, ch := make(chan struct{}), make(chan error, 1)
	if got := testing.AllocsPerRun(100, func() {
		ch <- nil
		if _, ok := awaitReply(done, ch); !ok {
			t.Fatal("awaitReply = false with a reply waiting, want true")
		}
	}); got != 0 {
		t.Fatalf("awaiting a reply allocates %v times, want 0", got)
	}
}

// TestCappingAResultWithinTheCapsNamesNoObject: every call's result goes
// through the output caps; one within them is kept in no object, and
// capping it costs its parts and their text only, not the object's name.
func TestCappingAResultWithinTheCapsNamesNoObject(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	p := &Pool{deps: &Deps{Outputs: Outputs{MaxBytes: 1 << 20, MaxLines: 1 << 20}}}
	ev := events.Event{Tenant: "default", Session: "01JDZ8Q6W4M5Y7K0V3N2B1C9XA", ID: "01JDZ8Q6W4M5Y7K0V3N2B1C9XB"}
	res := tool.Result{Parts: []tool.Part{{Type: "text", Text: "ok"}}}
	// The parts, and the text core.Measure reads them as.
	const want = 2
	if got := testing.AllocsPerRun(100, func() {
		if _, cut, _, err := p.capOutput(ev, res); cut || err != nil {
			t.Fatalf("capOutput cut=%v err=%v, want neither", cut, err)
		}
	}); got > want {
		t.Fatalf("capping a result within the caps allocates %v times, want at most %d", got, want)
	}
}
