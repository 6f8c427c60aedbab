package tool

import (
	"bytes"
	"encoding/json"
	"sync"
	"sync/atomic"
)

// The bounds of a typed tool's memo of validated arguments (argsMemo). The
// memo bridges the few milliseconds between a call's planning and its run,
// so it needs to hold about as many entries as calls of the tool are in
// flight at once on a node: a node runs at most a few hundred calls at a
// time. Arguments larger than memoMaxEntryBytes are not kept; their
// validation is done again when they run, as before.
const (
	// memoMaxEntries bounds the entries of one tool's memo.
	memoMaxEntries = 1024
	// memoMaxBytes bounds the bytes one tool's memo holds, keys, prepared
	// bytes and memoEntryOverhead per entry counted.
	memoMaxBytes = 256 << 10
	// memoMaxEntryBytes bounds one entry, counted as in memoMaxBytes.
	memoMaxEntryBytes = 8 << 10
	// memoEntryOverhead is what an entry costs beyond its bytes: the map's
	// slot, the string and slice headers, the ring's slot.
	memoEntryOverhead = 96
)

// argsMemo remembers, for one typed tool (New), the arguments that passed
// its full validation, keyed by their exact bytes, with the prepared bytes
// the typed decoder read for them (defaults filled, integers written
// plainly). A call's arguments are validated when the call is planned
// (Tool.Arguments) and again, the same bytes, when it runs, in another
// actor; with the memo the run only decodes the prepared bytes.
//
// Why it never lets through arguments that did not validate:
//   - An entry is added only after the full path (parse, schema check,
//     defaults, integer forms, strict decode into the argument type)
//     succeeded for exactly its key; failures are never kept, so every
//     refusal is made, and worded, by the full path, each time.
//   - The key is the whole byte string, compared by the map as a string:
//     no hash stands for the bytes, and no collision can match other bytes.
//     The key is a copy, so a caller changing its slice later changes
//     nothing in the memo; prepared bytes are never written after they are
//     stored.
//   - The full path is a pure function of the bytes and of the tool's
//     schema and argument type, which are fixed when New builds the tool and
//     owned by it (the memo lives in the same closure; a copy of the Tool
//     shares both). So a hit returns what the full path would compute again.
//   - The one key added without being validated itself is the HTML-escaped
//     form of a validated key (see put): the form encoding/json gives the
//     arguments when a request carrying them is encoded for the event log.
//     It differs only in \u003c, \u003e, \u0026, \u2028 and \u2029 escapes
//     inside strings, which decode to the same characters: it parses to the
//     same value, is as compact, and so validates and prepares exactly as
//     its original did.
//
// The memo is bounded (memoMaxEntries, memoMaxBytes, memoMaxEntryBytes) and
// forgets its oldest entries first; arguments it no longer holds are
// validated in full, as are those it never saw (a request read back after
// a restart, one planned by another node, a direct Run). So hostile input
// can only make it forget, never grow. It is safe for concurrent use.
type argsMemo struct {
	mu      sync.Mutex
	entries map[string][]byte // key → prepared bytes; nil means the key itself
	ring    []string          // keys, oldest at head; allocated on first use
	head, n int
	bytes   int
	// hits counts the lookups that found their arguments (for tests).
	hits atomic.Int64
}

// get returns the prepared bytes of validated arguments, and false for
// arguments the memo does not hold.
func (m *argsMemo) get(args []byte) ([]byte, bool) {
	m.mu.Lock()
	prepared, ok := m.entries[string(args)] // the conversion does not allocate
	m.mu.Unlock()
	if !ok {
		return nil, false
	}
	m.hits.Add(1)
	if prepared == nil {
		prepared = args
	}
	return prepared, true
}

// put records that args passed the full validation with prepared as the
// bytes the typed decoder read (nil when those are args themselves), and,
// when the event log's encoding would write args differently, that form
// too.
func (m *argsMemo) put(args, prepared []byte) {
	m.add(args, prepared)
	if htmlEscapes(args) {
		var esc bytes.Buffer
		json.HTMLEscape(&esc, args)
		m.add(esc.Bytes(), prepared)
	}
}

// htmlEscapes reports whether json.HTMLEscape would change b: whether it
// holds <, > or &, or U+2028 or U+2029 (E2 80 A8, E2 80 A9 in UTF-8).
func htmlEscapes(b []byte) bool {
	for i, c := range b {
		switch {
		case c == '<' || c == '>' || c == '&':
			return true
		case c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8:
			return true
		}
	}
	return false
}

func entrySize(key string, prepared []byte) int {
	return len(key) + len(prepared) + memoEntryOverhead
}

func (m *argsMemo) add(args, prepared []byte) {
	size := len(args) + len(prepared) + memoEntryOverhead
	if size > memoMaxEntryBytes {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[string(args)]; ok {
		return
	}
	if m.entries == nil {
		m.entries = make(map[string][]byte)
		m.ring = make([]string, memoMaxEntries)
	}
	for m.n > 0 && (m.n == memoMaxEntries || m.bytes+size > memoMaxBytes) {
		old := m.ring[m.head]
		m.bytes -= entrySize(old, m.entries[old])
		delete(m.entries, old)
		m.ring[m.head] = ""
		m.head = (m.head + 1) % memoMaxEntries
		m.n--
	}
	key := string(args)
	m.entries[key] = prepared
	m.ring[(m.head+m.n)%memoMaxEntries] = key
	m.n++
	m.bytes += size
}

// len returns how many entries the memo holds, and their counted bytes.
func (m *argsMemo) len() (entries, size int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n, m.bytes
}
