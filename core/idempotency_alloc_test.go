package core

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/callsheet/callsheet/internal/israce"
)

// TestMintingAnIdempotencyKeyAllocatesItsStringOnly: every call is given
// its key as it is decided; minting it allocates the key alone, and the
// key is the hash of its tenant, session, turn and index as ever.
func TestMintingAnIdempotencyKeyAllocatesItsStringOnly(t *testing.T) {
	for _, c := range []struct {
		tenant, session, turn string
		index                 int
	}{
		{"default", "01JDZ8Q6W4M5Y7K0V3N2B1C9XA", "01JDZ8Q6W4M5Y7K0V3N2B1C9XB", 0},
		{"", "", "", 0},
		{"a-tenant-with-a-name-longer-than-any-stack-buffer-of-the-usual-size-at-all", "s", "t", -3},
		{"t", "s", "turn", 1234567},
	} {
		h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%d", c.tenant, c.session, c.turn, c.index))
		if got, want := IdempotencyKey(c.tenant, c.session, c.turn, c.index), "cs_"+hex.EncodeToString(h[:16]); got != want {
			t.Errorf("IdempotencyKey(%q, %q, %q, %d) = %q, want %q", c.tenant, c.session, c.turn, c.index, got, want)
		}
	}
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	if got := testing.AllocsPerRun(100, func() {
		_ = IdempotencyKey("default", "01JDZ8Q6W4M5Y7K0V3N2B1C9XA", "01JDZ8Q6W4M5Y7K0V3N2B1C9XB", 3)
	}); got != 1 {
		t.Fatalf("IdempotencyKey allocates %v times, want 1", got)
	}
}
