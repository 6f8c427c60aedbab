package natslog

import (
	"bytes"
	"testing"
)

// TestPlanExtensionCopiesOnce: laying a busy second of a session's messages
// (1,200 of 2 KiB) out after its snapshot allocates each chunk's body about
// once, not again at each growth of an append: the open chunk is folded into
// the one before it 32 KiB at a time, about 75 times here.
func TestPlanExtensionCopiesOnce(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 2<<10)
	entries := make([]snapEntry, 1200)
	for i := range entries {
		entries[i] = snapEntry{sseq: uint64(2*i + 7), data: data}
	}
	const limit = 1 << 20
	for _, tip := range []struct {
		what string
		tip  snapTip
	}{
		{"no snapshot", snapTip{}},
		{"a snapshot of two chunks", planned(t, snapTip{}, entries[:600], limit)},
	} {
		rest := entries
		if tip.tip.upto > 0 {
			rest = entries[600:]
		}
		var x extension
		allocs := testing.AllocsPerRun(5, func() { x = planExtension(tip.tip, rest, limit) })
		if x.upto != rest[len(rest)-1].sseq {
			t.Fatalf("%s: the plan stops at stream seq %d, want %d", tip.what, x.upto, rest[len(rest)-1].sseq)
		}
		if allocs > 24 {
			t.Errorf("%s: laying out %d entries (%d KiB in %d chunks written) took %.0f allocations", tip.what, len(rest), len(rest)*len(data)>>10, len(x.writes), allocs)
		}
	}
}

// planned is the tip of a snapshot made of entries alone.
func planned(t *testing.T, tip snapTip, entries []snapEntry, limit int) snapTip {
	t.Helper()
	x := planExtension(tip, entries, limit)
	if x.upto == 0 {
		t.Fatal("nothing planned")
	}
	next := snapTip{k: x.cur.k, body: x.cur.kept(), guard: 1, upto: x.upto}
	next.last = next.body[len(next.body)-x.lastLen:]
	if x.fill != nil {
		next.prev = x.fill.kept()
	}
	return next
}
