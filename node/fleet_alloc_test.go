package node

import (
	"testing"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/internal/israce"
)

// TestPlacingASessionAllocatesNothing: a session actor asks the fleet
// where its session belongs (Place) as it decides; the fleet's view it
// routes by allocates nothing.
func TestPlacingASessionAllocatesNothing(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	f := &fleet{self: "n1", reg: &registry{}}
	f.initView()
	if got := testing.AllocsPerRun(100, func() {
		if p := f.Place("default", "01JDZ8Q6W4M5Y7K0V3N2B1C9XA", actors.Owner{Node: "n1"}); !p.Take {
			t.Fatalf("Place = %+v, want Take", p)
		}
	}); got != 0 {
		t.Fatalf("Place allocates %v times, want 0", got)
	}
}
