package projections_test

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/israce"
	"github.com/callsheet/callsheet/projections"
)

// decidedAndRead returns a golden stream's events twice: as read back, and
// minted again from their payloads by events.Encode, as a session actor
// hands them on once durable.
func decidedAndRead(t *testing.T, path string) (decided, read []events.Event) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		ev, err := events.Unmarshal(sc.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		p, err := events.Decode(ev)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		env := ev
		env.Data = nil
		decided, read = append(decided, events.Encode(env, p)), append(read, ev)
	}
	return decided, read
}

// TestSummaryOfDecidedEventsIsTheSummaryOfTheLog: the session index folds
// the events a session actor just decided from their payloads as decided
// (events.Kept), and gets what folding them as read back from the log gets.
func TestSummaryOfDecidedEventsIsTheSummaryOfTheLog(t *testing.T) {
	paths, _ := filepath.Glob("testdata/*.events.jsonl")
	if len(paths) == 0 {
		t.Fatal("no golden streams in testdata")
	}
	for _, p := range paths {
		decided, read := decidedAndRead(t, p)
		got := projections.FoldSummary(read[0].Tenant, read[0].Session, decided)
		want := projections.FoldSummary(read[0].Tenant, read[0].Session, read)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: folding the decided events gives\n%+v\nfolding them as read\n%+v", p, got, want)
		}
	}
}

// TestSummaryReadsADecidedTurnWithoutDecodingIt: folding a turn and its
// result as the session actor decided them allocates nothing once the
// summary knows its tool and outcome.
func TestSummaryReadsADecidedTurnWithoutDecodingIt(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	paths, _ := filepath.Glob("testdata/*.events.jsonl")
	var turn, result events.Event
	for _, p := range paths {
		decided, _ := decidedAndRead(t, p)
		for _, ev := range decided {
			switch ev.Type {
			case events.TypeTurnReceived:
				turn = ev
			case events.TypeResultCommitted:
				result = ev
			}
		}
	}
	if turn.ID == "" || result.ID == "" {
		t.Fatal("no TurnReceived and ResultCommitted in the golden streams")
	}
	s := projections.NewSummary(turn.Tenant, turn.Session)
	s.Apply(turn)
	s.Apply(result)
	if got := testing.AllocsPerRun(100, func() { s.Apply(turn); s.Apply(result) }); got != 0 {
		t.Fatalf("folding a decided turn and result allocates %v times, want 0", got)
	}
}
