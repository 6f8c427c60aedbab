package replay

import (
	"fmt"
	"time"

	"github.com/callsheet/callsheet/events"
)

// The checkpoint check of VerifyLog (docs/audit.md, "Checkpoints and the
// witness"): signed heads kept outside the log say how far it went, so a
// log that ends before one was cut.

// Checkpoint is a signed head of the session kept outside its log, and
// where it was found ("the checkpoint store", "witness W line 7"), for the
// report.
type Checkpoint struct {
	events.Checkpoint
	From string
}

// checkpoints checks every checkpoint given against the log: its rule, its
// signature (with keys), and that the log holds its head with its hash.
// One beyond the log's last event is a cut; the events after the latest
// checkpoint that checks out are a warning: a cut of them would not show.
func (c *chainCheck) checkpoints() {
	evs := c.evs
	last := evs[len(evs)-1]
	keys := c.keyIDs()
	var latest *Checkpoint
	for i := range c.opts.Checkpoints {
		cp := &c.opts.Checkpoints[i]
		if cp.Tenant != c.v.tenant || cp.Session != c.v.session {
			continue
		}
		c.r.Checkpoints++
		if cp.Chain != c.chain {
			c.problem(len(evs), false, "%s names the chain rule %s, but the log is linked by %s", cp.describe(), cp.Chain, c.chain)
			continue
		}
		if len(keys) > 0 {
			pub, ok := keys[cp.Key]
			if !ok {
				c.problem(len(evs), false, "%s was signed with key %s, which is not a key given to check it: it proves nothing here", cp.describe(), cp.Key)
				continue
			}
			if err := cp.Verify(pub); err != nil {
				c.problem(len(evs), false, "%s does not verify: %v", cp.describe(), err)
				continue
			}
		}
		if cp.Seq > last.Seq {
			closed := ""
			if cp.Closed {
				closed = ", the session's close among them"
			}
			c.r.Cut = max(c.r.Cut, cp.Seq)
			c.problem(len(evs), false, "the log was cut: %s holds the head at seq %d (hash %s), and the log ends at seq %d: seq %d to %d were removed%s",
				cp.describe(), cp.Seq, cp.Hash, last.Seq, last.Seq+1, cp.Seq, closed)
			continue
		}
		k := c.indexOfSeq(cp.Seq)
		switch {
		case k < 0:
			c.problem(len(evs), false, "%s holds the head at seq %d, which is not in the log", cp.describe(), cp.Seq)
		case c.hashes[k] != "" && c.hashes[k] != cp.Hash:
			c.problem(k, false, "seq %d (%s) was changed, or the log before it rewritten, after %s signed it: it hashed to %s then, and hashes to %s now",
				cp.Seq, evs[k].Type, cp.describe(), cp.Hash, c.hashes[k])
		case latest == nil || cp.Seq > latest.Seq:
			latest = cp
		}
	}
	if latest == nil {
		return
	}
	c.r.Checkpointed, c.r.CheckpointedAt, c.r.CheckpointFrom = latest.Seq, latest.Signed, latest.From
	c.r.CheckpointInterval, c.r.CheckpointEvery = time.Duration(latest.IntervalMS)*time.Millisecond, latest.Every
	if latest.Seq < last.Seq && c.r.Cut == 0 {
		k := c.indexOfSeq(latest.Seq)
		span := last.Time.Sub(evs[k].Time).Round(time.Millisecond)
		c.problem(len(evs), true, "seq %d to %d (%s of the session) come after the latest checkpoint (seq %d, %s): a cut of them would not show",
			latest.Seq+1, last.Seq, span, latest.Seq, latest.describe())
	}
}

// describe names a checkpoint in a problem: where it is, who signed it
// when.
func (cp *Checkpoint) describe() string {
	s := fmt.Sprintf("the checkpoint in %s, signed", cp.From)
	if cp.Node != "" {
		s += " by node " + cp.Node
	}
	return s + " at " + cp.Signed.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

func (c *chainCheck) indexOfSeq(seq uint64) int {
	for i := len(c.evs) - 1; i >= 0; i-- {
		if c.evs[i].Seq == seq {
			return i
		}
	}
	return -1
}
