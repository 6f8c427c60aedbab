package events_test

import (
	"bufio"
	"encoding/json"
	"os"
	"runtime"
	"testing"

	"github.com/callsheet/callsheet/events"
)

// BenchmarkDecideStoreHash is one event's encoding work from its decision
// to the next event's link, per event, over the events of the golden
// stream projections/testdata/mixed.events.jsonl (a mix of turns, calls,
// outcomes and commits; "small" are its 41 events under 1 KB, "50KB" its
// two of a call whose output is 50 KB): "before" as the session actor and the log did it
// until issue 14's third round (Payload when deciding, json.Marshal of the
// whole event to store it, json.Unmarshal of a request's payload for its
// lane, Hash for the next link), "after" with one encoding (Encode when
// deciding, Marshal returning what it made, Hash); since issue
// 14's fourth round Encode writes the payload with its generated encoder
// and hashes the event from the payload's value, and Hash returns that
// hash. Besides wall
// time it reports cpu-ns/op, the CPU time of the benchmark's own thread,
// which a loaded machine does not inflate. Run:
//
//	go test -run '^$' -bench DecideStoreHash -benchmem ./events/
func BenchmarkDecideStoreHash(b *testing.B) {
	f, err := os.Open("../projections/testdata/mixed.events.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	type minted struct {
		env     events.Event
		payload any
	}
	var small, large []minted
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		ev, err := events.Unmarshal(sc.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		p, err := events.Decode(ev)
		if err != nil {
			b.Fatal(err)
		}
		// As the actor holds a draft's payload: the value, not a pointer.
		m := minted{env: envelopeOf(ev), payload: derefPayload(p)}
		if len(sc.Bytes()) < 1<<10 {
			small = append(small, m)
		} else {
			large = append(large, m)
		}
	}
	if len(small) == 0 || len(large) == 0 {
		b.Fatalf("%d small and %d large events in the stream", len(small), len(large))
	}
	link := events.Genesis("default", "s")
	for _, set := range []struct {
		name string
		evs  []minted
	}{{"small", small}, {"50KB", large}} {
		evs := set.evs
		b.Run(set.name+"/before", func(b *testing.B) {
			b.ReportAllocs()
			defer reportThreadCPU(b)()
			for i := 0; b.Loop(); i++ {
				m := evs[i%len(evs)]
				ev := m.env
				// Payload was json.Marshal until issue 14's fourth round.
				data, err := json.Marshal(m.payload)
				if err != nil {
					b.Fatal(err)
				}
				ev.Data = data
				ev.Prev = link
				if _, err := json.Marshal(ev); err != nil {
					b.Fatal(err)
				}
				if ev.Type == events.TypeToolCallRequested {
					var r struct {
						Concurrency string `json:"concurrency"`
						Node        string `json:"node"`
					}
					if err := json.Unmarshal(ev.Data, &r); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := events.Hash(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(set.name+"/after", func(b *testing.B) {
			b.ReportAllocs()
			defer reportThreadCPU(b)()
			for i := 0; b.Loop(); i++ {
				m := evs[i%len(evs)]
				env := m.env
				env.Prev = link
				ev := events.Encode(env, m.payload)
				if _, err := events.Marshal(ev); err != nil {
					b.Fatal(err)
				}
				if _, err := events.Hash(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// reportThreadCPU locks the benchmark to its thread and returns the func
// that reports the thread's CPU time per operation.
func reportThreadCPU(b *testing.B) func() {
	runtime.LockOSThread()
	start, ok := threadCPUNanos()
	return func() {
		end, _ := threadCPUNanos()
		runtime.UnlockOSThread()
		if ok && b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

// derefPayload returns the value a payload pointer points to.
func derefPayload(p any) any {
	switch v := p.(type) {
	case *events.SessionOpened:
		return *v
	case *events.OwnershipTaken:
		return *v
	case *events.TurnReceived:
		return *v
	case *events.ToolCallRequested:
		return *v
	case *events.ToolCallStarted:
		return *v
	case *events.ToolCallCompleted:
		return *v
	case *events.ToolCallFailed:
		return *v
	case *events.ResultCommitted:
		return *v
	case *events.TurnCompleted:
		return *v
	}
	return p
}
