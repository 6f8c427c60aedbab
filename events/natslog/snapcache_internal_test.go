package natslog

import (
	"fmt"
	"testing"
)

// TestSnapTipsBound: the tips stay within their byte bound, the least
// recently used out first; an older tip does not replace a newer one; a tip
// over the whole bound is not kept.
func TestSnapTipsBound(t *testing.T) {
	tip := func(guard uint64, n int) snapTip { return snapTip{body: make([]byte, n), guard: guard} }
	c := newSnapTips(3 * tip(0, 1000).cost("s0"))
	for i := range 3 {
		c.put(fmt.Sprintf("s%d", i), tip(1, 1000))
	}
	if _, ok := c.get("s0"); !ok { // s0 used: s1 is the least recently
		t.Fatal("s0 evicted within the bound")
	}
	c.put("s3", tip(1, 1000))
	if _, ok := c.get("s1"); ok {
		t.Fatal("s1, the least recently used, kept past the bound")
	}
	for _, k := range []string{"s0", "s2", "s3"} {
		if _, ok := c.get(k); !ok {
			t.Fatalf("%s evicted, not the least recently used", k)
		}
	}
	if c.bytes > c.max {
		t.Fatalf("%d bytes held, bound %d", c.bytes, c.max)
	}
	c.put("s0", tip(5, 10))
	c.put("s0", tip(4, 20))
	if got, _ := c.get("s0"); got.guard != 5 {
		t.Fatalf("tip with guard %d replaced the newer one", got.guard)
	}
	c.put("big", tip(1, 4000))
	if _, ok := c.get("big"); ok {
		t.Fatal("a tip over the whole bound is kept")
	}
	c.forget("s0")
	if _, ok := c.get("s0"); ok {
		t.Fatal("a forgotten tip is kept")
	}
	want := 0
	for k, e := range c.byKey {
		want += e.Value.(*tipEntry).tip.cost(k)
	}
	if c.bytes != want || c.lru.Len() != len(c.byKey) {
		t.Fatalf("counted %d bytes for %d tips; they cost %d, %d listed", c.bytes, len(c.byKey), want, c.lru.Len())
	}
}
