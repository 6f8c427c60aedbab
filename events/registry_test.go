package events_test

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
)

// TestRegistryIsTheDocsList: docs/events.md describes, under "Event
// types", exactly the registered types, in the registry's order, and every
// registered type decodes to its registered payload type.
func TestRegistryIsTheDocsList(t *testing.T) {
	b, err := os.ReadFile("../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []events.Type
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "## Event types":
			in = true
		case strings.HasPrefix(line, "## "):
			in = false
		case in && strings.HasPrefix(line, "### "):
			documented = append(documented, events.Type(strings.TrimPrefix(line, "### ")))
		}
	}
	if got := events.Types(); !slices.Equal(documented, got) {
		t.Fatalf("docs/events.md documents %v,\nthe registry holds %v", documented, got)
	}
	for _, typ := range events.Types() {
		p, err := events.Decode(events.Event{ID: "e", Seq: 1, Type: typ, Data: []byte(`{}`)})
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		want, _ := events.PayloadType(typ)
		if got := reflect.TypeOf(p); got != reflect.PointerTo(want) {
			t.Errorf("%s decodes to %v, want *%v", typ, got, want)
		}
		if !events.Known(typ) {
			t.Errorf("%s not Known", typ)
		}
	}
	if events.Known("NoSuchEvent") {
		t.Error("an unregistered type is Known")
	}
}
