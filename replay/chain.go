package replay

import (
	"crypto/ed25519"
	"fmt"
	"slices"
	"time"

	"github.com/callsheet/callsheet/events"
)

// The hash chain and signature checks of Verify (docs/audit.md, "Verifying a
// session"; docs/events.md, "The hash chain").

// VerifyOptions refine VerifyLog. The zero value checks the chain and
// reports signatures without checking them.
type VerifyOptions struct {
	// Keys are the public keys the session's signatures (HeadSigned
	// events) are checked with. With at least one key, a signature by
	// another key is a problem, and so is a log no signature covers.
	Keys []ed25519.PublicKey
	// RequireChain makes events without a hash link a problem rather than
	// a warning (an old log is then refused).
	RequireChain bool
	// Checkpoints are signed heads of the session kept outside its log
	// (the node's checkpoint store, a witness file): each must be of the
	// log's rule, name an event of the log with its hash as it is now, and,
	// with Keys, verify with one of them; one beyond the log's last event
	// says the log was cut (checkpoints.go). Those of other sessions are
	// ignored.
	Checkpoints []Checkpoint
}

// Report is what VerifyLog found: the problems, and what the chain and the
// signatures cover.
type Report struct {
	Problems []Problem
	// Events is the number of events checked; Unchained the number stored
	// before the chain began (written by a callsheet without it).
	Events, Unchained int
	// Head is the hash of the last event, "" when it cannot be hashed.
	Head string
	// HeadSeq is the last event's Seq.
	HeadSeq uint64
	// Signed is the Seq of the latest event a signature covers that checked
	// out with one of the options' Keys (0: none). SignedReason is that
	// signature's reason (events.SignClosed for a session closed and signed
	// at its close).
	Signed       uint64
	SignedReason string
	// Signatures is the number of HeadSigned events.
	Signatures int
	// Closed reports whether the log holds SessionClosed.
	Closed bool
	// Chain is the rule the log's links were checked by (chainRule).
	Chain events.Chain
	// Checkpoints is the number of the session's checkpoints given;
	// Checkpointed the Seq of the latest that checked out (0: none),
	// signed at CheckpointedAt, found in CheckpointFrom; Cut the Seq of the
	// latest head a checkpoint holds beyond the log's end (0: none).
	Checkpoints    int
	Checkpointed   uint64
	CheckpointedAt time.Time
	CheckpointFrom string
	Cut            uint64
	// CheckpointInterval and CheckpointEvery are the latest checkpoint's
	// node's cadence (events.Checkpoint): how stale a head may be when a
	// cut after it goes unseen.
	CheckpointInterval time.Duration
	CheckpointEvery    int
}

// maxChainProblems bounds the broken links reported one by one: a log
// renumbered after a drop breaks every later link.
const maxChainProblems = 20

// VerifyLog checks one session's log, given in stored order, as Verify
// does, and its hash chain and signatures:
//
//   - every event carries in Prev the hash of the event stored before it,
//     and the first the session's genesis link, under the rule the log is
//     chained by (Report.Chain); a link that
//     does not match names the event that was changed, dropped, reordered or
//     inserted, and what it expected;
//   - events without a link before the first one with a link were written
//     before the chain: a warning ("unchained"), or a problem with
//     RequireChain; one without a link after it is a problem;
//   - every HeadSigned names an earlier event by its Seq and its hash as it
//     is now, and, with Keys, verifies with one of them;
//   - every checkpoint given (VerifyOptions.Checkpoints) is of the log's
//     rule, verifies with Keys, and names an event of the log with its
//     hash: one beyond the log's end is a cut tail.
//
// VerifyLog is pure: no clock, no I/O.
func VerifyLog(tenant, session string, evs []events.Event, o VerifyOptions) Report {
	r := Report{Events: len(evs)}
	v := newVerifier(tenant, session)
	if len(evs) == 0 {
		r.Problems = []Problem{{Message: fmt.Sprintf("session %s of tenant %s has no events", session, tenant)}}
		return r
	}
	for i, ev := range evs {
		v.cur = i
		v.check(i, ev)
	}
	v.cur = len(evs)
	v.finish()
	chain := chainRule(tenant, session, evs)
	c := &chainCheck{v: v, evs: evs, opts: o, r: &r, chain: chain, genesis: chain.Genesis(tenant, session)}
	r.Chain = chain
	c.run()
	slices.SortStableFunc(v.problems, func(a, b Problem) int {
		if a.at != b.at {
			return a.at - b.at
		}
		return a.rank - b.rank
	})
	r.Problems = v.problems
	return r
}

// chainRule returns the rule a session's log is linked by: the one its
// first event's genesis link names (events.ChainOf). When that link names
// neither (the first event was changed, or dropped), it is Chain2 if the
// second or the last event is linked to the one before it by Chain2, so
// the report names what was changed rather than every link after it.
func chainRule(tenant, session string, evs []events.Event) events.Chain {
	c := events.ChainOf(tenant, session, evs[0])
	if c == events.Chain2 || evs[0].Prev == events.Chain1.Genesis(tenant, session) {
		return c
	}
	for _, i := range []int{1, len(evs) - 1} {
		if i < 1 || i >= len(evs) || evs[i].Prev == "" {
			continue
		}
		if h, err := events.Chain2.Hash(evs[i-1]); err == nil && h == evs[i].Prev {
			return events.Chain2
		}
	}
	return c
}

type chainCheck struct {
	v       *verifier
	evs     []events.Event
	opts    VerifyOptions
	r       *Report
	chain   events.Chain
	genesis string
	hashes  []string // "" where the event cannot be hashed
	byHash  map[string]int
	// signedAt is the position of the latest event a signature covers.
	signedAt int
}

func (c *chainCheck) problem(at int, warning bool, format string, args ...any) {
	var seq uint64
	if at < len(c.evs) {
		seq = c.evs[at].Seq
	}
	// rank 0: at one event, the chain's finding comes before the other
	// checks' (a gap's "event 7 is missing" follows "seq 7 was dropped").
	c.v.problems = append(c.v.problems, Problem{Seq: seq, Warning: warning, Message: fmt.Sprintf(format, args...), at: at, rank: -1})
}

func (c *chainCheck) run() {
	evs := c.evs
	c.hashes = make([]string, len(evs))
	c.byHash = make(map[string]int, len(evs))
	for i, ev := range evs {
		h, err := c.chain.Hash(ev)
		if err != nil {
			c.problem(i, false, "cannot hash the event for the chain: %v", err)
			continue
		}
		c.hashes[i] = h
		if _, ok := c.byHash[h]; !ok {
			c.byHash[h] = i
		}
	}
	last := len(evs) - 1
	c.r.Head, c.r.HeadSeq = c.hashes[last], evs[last].Seq

	start := slices.IndexFunc(evs, events.Chained)
	switch {
	case start < 0:
		c.r.Unchained = len(evs)
		c.problem(len(evs), !c.opts.RequireChain, "the log is unchained: none of its %d events carries a hash link (written by a callsheet before the hash chain); only the checks above vouch for it, and a consistent rewrite would pass them", len(evs))
	case start > 0:
		c.r.Unchained = start
		c.problem(start, !c.opts.RequireChain, "events seq %d to %d carry no hash link (written before the hash chain); the chain starts here, linked to seq %d, so a change to seq %d shows but a change before it does not", evs[0].Seq, evs[start-1].Seq, evs[start-1].Seq, evs[start-1].Seq)
	}
	if start >= 0 {
		c.links(start)
	}
	c.signatures()
	c.checkpoints()
	c.coverage()
}

// links checks every link from evs[start] on. A single change breaks one
// link (a changed event breaks the link of the event after it) or a run of
// them (a changed link breaks its own and the next; renumbering after a drop
// breaks every later one): each run is reported once, at its first event.
func (c *chainCheck) links(start int) {
	evs := c.evs
	// want[i] is what evs[i].Prev should be; "" when unknown (the event
	// before cannot be hashed, or evs[i] has no link: reported apart).
	want := make([]string, len(evs))
	broken := make([]bool, len(evs))
	for i := start; i < len(evs); i++ {
		switch {
		case evs[i].Prev == "":
			c.problem(i, false, "%s carries no hash link, but the events before it are chained: it was inserted, or its link was removed", evs[i].Type)
			continue
		case i == 0:
			want[i] = c.genesis
		default:
			want[i] = c.hashes[i-1]
		}
		broken[i] = want[i] != "" && evs[i].Prev != want[i]
	}
	// linkedBy[h] counts the events that carry h as their link.
	linkedBy := map[string]int{}
	for _, ev := range evs[start:] {
		linkedBy[ev.Prev]++
	}
	inserted := map[int]bool{}
	reported, reordered := 0, false
	for i := start; i < len(evs); i++ {
		if !broken[i] {
			continue
		}
		j, resolved := c.byHash[evs[i].Prev]
		if resolved && reordered {
			continue // a consequence of the reordering reported above
		}
		if resolved && j < i-1 {
			// evs[i] skips the events between it and the one it is chained
			// to. If the event before it has a successor of its own, evs[i]
			// is the one that does not belong (it repeats a link); else
			// those between were inserted, unless they were reported so.
			if i > 0 && linkedBy[c.hashes[i-1]] > 0 && j < i-1 {
				inserted[i] = true
				if reported++; reported <= maxChainProblems {
					c.problem(i, false, "%s was inserted: it is chained to seq %d (%s), not to seq %d (%s) stored before it, from which the rest of the chain goes on (it records prev %s, and the chain expects %s, the hash of seq %d)",
						evs[i].Type, evs[j].Seq, evs[j].Type, evs[i-1].Seq, evs[i-1].Type, evs[i].Prev, want[i], evs[i-1].Seq)
				}
				continue
			}
			all := true
			for k := j + 1; k < i; k++ {
				all = all && inserted[k]
			}
			if all {
				continue
			}
		}
		run := 1
		if !resolved {
			for i+run < len(evs) && broken[i+run] {
				if _, ok := c.byHash[evs[i+run].Prev]; ok {
					break
				}
				run++
			}
		}
		if reported++; reported <= maxChainProblems {
			msg, isReorder := c.diagnose(i, want[i], j, resolved, run)
			reordered = reordered || isReorder
			c.problem(i, false, "%s", msg)
		}
		i += run - 1
	}
	if reported > maxChainProblems {
		c.problem(len(evs), false, "the chain breaks %d more times (%d in all): the log was rewritten from the first of them on", reported-maxChainProblems, reported)
	}
}

// diagnose says why evs[i]'s link is not want, the hash of the event stored
// before it (or the genesis link): j is the event it names, when it names
// one of the log (resolved); run is how many links from i on break without
// naming an event of the log. It reports whether it found a reordering.
func (c *chainCheck) diagnose(i int, want string, j int, resolved bool, run int) (string, bool) {
	evs, ev := c.evs, c.evs[i]
	got := ev.Prev
	expected := fmt.Sprintf("it records prev %s, and the chain expects %s", got, want)
	if i == 0 {
		if resolved {
			return fmt.Sprintf("the first event stored is chained to seq %d, which is stored after it: the log was reordered (%s, the genesis link of tenant %s session %s)", evs[j].Seq, expected, c.v.tenant, c.v.session), true
		}
		return fmt.Sprintf("the first event stored does not carry the genesis link of tenant %s session %s: events before it were dropped, or it belongs to another session, or it was changed (%s)", c.v.tenant, c.v.session, expected), false
	}
	before := evs[i-1]
	expected += fmt.Sprintf(", the hash of seq %d", before.Seq)
	switch {
	case got == c.genesis:
		return fmt.Sprintf("%s carries the session's genesis link, so it was the first event: the %d events stored before it, from seq %d on, were inserted (%s)", ev.Type, i, evs[0].Seq, expected), false
	case resolved && j < i-1:
		return fmt.Sprintf("%s is chained to seq %d (%s), not to seq %d stored before it: the events from seq %d to seq %d were inserted (%s)",
			ev.Type, evs[j].Seq, evs[j].Type, before.Seq, evs[j+1].Seq, before.Seq, expected), false
	case resolved:
		return fmt.Sprintf("%s is chained to seq %d (%s), which is stored after it: the log was reordered (%s)", ev.Type, evs[j].Seq, evs[j].Type, expected), true
	case ev.Seq > before.Seq+1:
		missing := fmt.Sprintf("seq %d", before.Seq+1)
		if ev.Seq > before.Seq+2 {
			missing = fmt.Sprintf("seq %d to %d", before.Seq+1, ev.Seq-1)
		}
		return fmt.Sprintf("%s was chained to an event that is not in the log: %s, stored between seq %d and this one, was dropped (%s)", ev.Type, missing, before.Seq, expected), false
	case run == 1:
		return fmt.Sprintf("seq %d (%s) was changed after this event was written: this event recorded its hash as %s, and it hashes to %s now", before.Seq, before.Type, got, want), false
	case run == 2:
		return fmt.Sprintf("seq %d (%s) and this event (%s) were both changed after they were written, or this event alone, its link included (%s; the event after this one does not match it either)", before.Seq, before.Type, ev.Type, expected), false
	default:
		last := evs[i+run-1]
		return fmt.Sprintf("the %d links from here to seq %d all fail: the events from seq %d on were changed one by one, as when an event before this one is dropped and the later ones renumbered (%s)", run, last.Seq, before.Seq, expected), false
	}
}

// keyIDs maps the options' keys by their ids.
func (c *chainCheck) keyIDs() map[string]ed25519.PublicKey {
	keys := map[string]ed25519.PublicKey{}
	for _, k := range c.opts.Keys {
		keys[events.KeyID(k)] = k
	}
	return keys
}

// signatures checks every HeadSigned.
func (c *chainCheck) signatures() {
	evs := c.evs
	keys := c.keyIDs()
	var signedAt int
	for i, ev := range evs {
		if ev.Type == events.TypeHeadSigned {
			c.r.Signatures++
		}
		if ev.Type == events.TypeSessionClosed {
			c.r.Closed = true
		}
		if ev.Type != events.TypeHeadSigned {
			continue
		}
		p, err := events.Decode(ev)
		if err != nil {
			continue // reported as undecodable
		}
		s := p.(*events.HeadSigned)
		k := slices.IndexFunc(evs[:i], func(e events.Event) bool { return e.Seq == s.Seq })
		if k < 0 {
			c.problem(i, false, "the signature names seq %d, which is not stored before it", s.Seq)
			continue
		}
		if c.hashes[k] != "" && c.hashes[k] != s.Hash {
			c.problem(i, false, "the signature is of seq %d with hash %s, but seq %d hashes to %s now: seq %d was changed, or the chain before it was rewritten, after it was signed", s.Seq, s.Hash, s.Seq, c.hashes[k], s.Seq)
			continue
		}
		if len(keys) == 0 {
			continue
		}
		pub, ok := keys[s.Key]
		if !ok {
			c.problem(i, false, "the signature of seq %d was made with key %s, which is not a key given to check it: it proves nothing here", s.Seq, s.Key)
			continue
		}
		if err := c.chain.VerifyHead(pub, c.v.tenant, c.v.session, *s); err != nil {
			c.problem(i, false, "the signature of seq %d does not verify: %v", s.Seq, err)
			continue
		}
		if s.Seq >= c.r.Signed {
			c.r.Signed, c.r.SignedReason, signedAt = s.Seq, s.Reason, k
		}
	}
	c.signedAt = signedAt
}

// coverage reports, with keys, a log that neither a signature nor a
// checkpoint covers, and the events after the last signed or checkpointed
// one.
func (c *chainCheck) coverage() {
	// Without keys a signature is counted (Report.Signatures), not checked:
	// not a problem, and not a warning either (the caller says so).
	if len(c.opts.Keys) == 0 {
		return
	}
	evs := c.evs
	if c.r.Signed == 0 && c.r.Checkpointed == 0 {
		c.problem(len(evs), false, "no signature in the log verifies with the given key, and no checkpoint does: nothing here is signed")
		return
	}
	if c.r.Checkpointed > c.r.Signed {
		return // the checkpoints' own warning says what follows the latest
	}
	// What follows the signed event, but for signatures, is not signed.
	for j := c.signedAt + 1; j < len(evs); j++ {
		if evs[j].Type != events.TypeHeadSigned {
			c.problem(len(evs), true, "seq %d to %d come after the last signed event (seq %d): the chain covers them and no signature does, so a change to the last of them would not show", evs[j].Seq, evs[len(evs)-1].Seq, c.r.Signed)
			break
		}
	}
}
