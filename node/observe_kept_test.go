package node

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/callsheet/callsheet/events"
)

// TestObserverReadsADecidedTurnAsDecoded: what the observer reads of a
// TurnReceived a session actor just decided (keptTurn, from the payload as
// decided) is what it reads of the event decoded from the log.
func TestObserverReadsADecidedTurnAsDecoded(t *testing.T) {
	paths, _ := filepath.Glob("../projections/testdata/*.events.jsonl")
	n := 0
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			ev, err := events.Unmarshal(sc.Bytes())
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if ev.Type != events.TypeTurnReceived {
				continue
			}
			var tr events.TurnReceived
			if err := events.DecodeInto(ev, &tr); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			var want turnReceived
			if err := events.DecodePartial(ev, &want); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if got := keptTurn(tr); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s seq %d: keptTurn gives\n%+v\ndecoding gives\n%+v", path, ev.Seq, got, want)
			}
			n++
		}
		f.Close()
	}
	if n == 0 {
		t.Fatal("no TurnReceived in the golden streams")
	}
}
