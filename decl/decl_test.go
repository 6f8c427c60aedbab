package decl_test

import (
	"testing"

	"github.com/callsheet/callsheet/decl"
)

// TestEmptyTakesTheStrictest: an undeclared effect, replay or class is the
// strictest value, and only the listed values are valid.
func TestEmptyTakesTheStrictest(t *testing.T) {
	if got := decl.Effect("").OrStrictest(); got != decl.EffectSideEffecting {
		t.Errorf("empty effect = %q, want %q", got, decl.EffectSideEffecting)
	}
	if got := decl.Replay("").OrStrictest(); got != decl.ReplayNever {
		t.Errorf("empty replay = %q, want %q", got, decl.ReplayNever)
	}
	if got := decl.Class("").OrStrictest(); got != decl.ClassExclusive {
		t.Errorf("empty class = %q, want %q", got, decl.ClassExclusive)
	}
	if got := decl.ClassParallelSafe.OrStrictest(); got != decl.ClassParallelSafe {
		t.Errorf("declared class = %q, want it kept", got)
	}
	for _, c := range decl.Classes() {
		if !c.Valid() {
			t.Errorf("%q not valid", c)
		}
	}
	for _, bad := range []string{"", "Exclusive", "sometimes"} {
		if decl.Class(bad).Valid() || decl.Effect(bad).Valid() || decl.Replay(bad).Valid() {
			t.Errorf("%q valid", bad)
		}
	}
}
