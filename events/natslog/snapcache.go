package natslog

import (
	"container/list"
	"sync"
)

// snapTip is what a Log remembers of a session's snapshot after it read it
// (and checked it against the log) or wrote it: the last chunk as stored
// and the one before it, the guard of the next write, and the log message
// the snapshot ends with.
// Compacting from it after a batch appends the batch's messages to the last
// chunk without reading or checking the chunks before it again; the guard
// makes a write from a tip that is no longer the stored snapshot's fail
// (snapshot.go, "Who writes").
type snapTip struct {
	// k is the last chunk's index and body its body as stored; prev is
	// chunk k-1's (nil for chunk 0), which the last one's messages are
	// folded into (extendSnapshot).
	k    int
	body []byte
	prev []byte
	// guard is the snapshot stream's last sequence of the session's chunks.
	guard uint64
	// upto is the log stream sequence of the snapshot's last message, last
	// that message's data (aliasing body).
	upto uint64
	last []byte
}

// cost is what a tip counts against the cache's bound.
func (t snapTip) cost(key string) int { return len(key) + cap(t.body) + cap(t.prev) + 128 }

// snapTips remembers tips, least recently used evicted first, up to max
// bytes in all (snapTip.cost).
type snapTips struct {
	mu    sync.Mutex
	max   int
	bytes int
	byKey map[string]*list.Element
	lru   list.List // of *tipEntry, most recently used first
}

type tipEntry struct {
	key string
	tip snapTip
}

func newSnapTips(max int) *snapTips {
	return &snapTips{max: max, byKey: map[string]*list.Element{}}
}

// get returns the session's tip.
func (c *snapTips) get(key string) (snapTip, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return snapTip{}, false
	}
	c.lru.MoveToFront(e)
	return e.Value.(*tipEntry).tip, true
}

// put remembers t unless the session's remembered tip was written after it
// (a higher guard): of two writers that both succeeded, the later one's tip
// is the stored snapshot's. A tip over the whole bound is not remembered.
func (c *snapTips) put(key string, t snapTip) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		te := e.Value.(*tipEntry)
		if te.tip.guard > t.guard {
			return
		}
		c.remove(e)
	}
	cost := t.cost(key)
	if cost > c.max {
		return
	}
	for c.bytes+cost > c.max {
		c.remove(c.lru.Back())
	}
	c.byKey[key] = c.lru.PushFront(&tipEntry{key: key, tip: t})
	c.bytes += cost
}

// forget drops the session's tip.
func (c *snapTips) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		c.remove(e)
	}
}

func (c *snapTips) remove(e *list.Element) {
	te := c.lru.Remove(e).(*tipEntry)
	delete(c.byKey, te.key)
	c.bytes -= te.tip.cost(te.key)
}
