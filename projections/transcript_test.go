package projections_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

func readStream(t *testing.T, path string) []events.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []events.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		ev, err := events.Unmarshal(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// TestGoldenStreams folds each recorded event stream under testdata (written
// by a real node: go test ./node -run TestLiveTranscriptEqualsReplayed
// -update) and compares the bytes with the transcript the node served.
func TestGoldenStreams(t *testing.T) {
	paths, _ := filepath.Glob("testdata/*.events.jsonl")
	if len(paths) == 0 {
		t.Fatal("no golden streams in testdata")
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			evs := readStream(t, p)
			want, err := os.ReadFile(strings.TrimSuffix(p, ".events.jsonl") + ".transcript.json")
			if err != nil {
				t.Fatal(err)
			}
			tr, err := projections.Fold(evs[0].Session, evs)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := projections.Marshal(tr)
			if string(got) != string(want) {
				t.Fatalf("folded transcript differs from the golden one:\n%s", got)
			}
			// Folding one event at a time gives the same bytes.
			f := projections.NewTranscriptFolder(evs[0].Session)
			for _, ev := range evs {
				if err := f.Apply(ev); err != nil {
					t.Fatal(err)
				}
			}
			inc, _ := projections.Marshal(f.Transcript())
			if string(inc) != string(want) {
				t.Fatalf("incremental fold differs")
			}
		})
	}
}

func TestFoldRefusesAResultForAnUnknownTurn(t *testing.T) {
	ev := events.Event{ID: "e1", Tenant: "d", Session: "s", Seq: 1, Type: events.TypeResultCommitted,
		Data: json.RawMessage(`{"turn":"nope","call":"a","index":0,"result":{}}`)}
	if _, err := projections.Fold("s", []events.Event{ev}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("err=%v, want an error naming the turn", err)
	}
}
