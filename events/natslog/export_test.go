package natslog

import "github.com/callsheet/callsheet/events"

// EncodeSnapshot is the body of a snapshot chunk holding the log messages
// datas at the stream sequences sseqs: for tests that forge chunks.
func EncodeSnapshot(sseqs []uint64, datas [][]byte) []byte {
	entries := make([]snapEntry, len(sseqs))
	for i := range sseqs {
		entries[i] = snapEntry{sseq: sseqs[i], data: datas[i]}
	}
	return encodeSnap(entries)
}

// GroupCommits is how many group commits l has stored.
func GroupCommits(l *Log) int64 { return l.groupStats() }

// AllOf is one Option that applies opts in order (a test mode of several).
func AllOf(opts ...Option) Option {
	return func(c *config) error {
		for _, o := range opts {
			if err := o(c); err != nil {
				return err
			}
		}
		return nil
	}
}

// PackAppend packs evs into messages as Append does, publishing nothing,
// and puts back the buffers it took: for tests that count what packing
// allocates.
func PackAppend(l *Log, tenant, session string, expectedLast uint64, evs []events.Event) error {
	_, _, _, pooled, err := l.encode(tenant, session, expectedLast, evs)
	putPacked(pooled)
	return err
}

// TipBytes is what the snapshot tips l remembers count against their bound
// (snapTip.cost: the capacity of their bodies, not only their length).
func TipBytes(l *Log) int {
	l.tips.mu.Lock()
	defer l.tips.mu.Unlock()
	return l.tips.bytes
}
