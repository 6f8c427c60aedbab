package replay

import (
	"crypto/ed25519"
	"fmt"

	"github.com/callsheet/callsheet/events"
)

// DeletionsReport is what VerifyDeletions found in a tenant's deletions
// log.
type DeletionsReport struct {
	// Receipts counts the receipts read; Problems says what is wrong, in
	// log order (nil for a log that verifies).
	Receipts int
	Problems []string
	// Signed counts the receipts whose signature verified with one of the
	// keys given (0 when none were given); Head is the hash of the last
	// receipt (what a witness of the log would keep).
	Signed int
	Head   string
}

// OK reports whether the log verified.
func (r DeletionsReport) OK() bool { return len(r.Problems) == 0 }

// VerifyDeletions checks a tenant's deletions log, its receipts as stored,
// in order (docs/audit.md, "Deletion receipts"): each parses as a receipt
// of tenant; positions run 1, 2, ... without a gap; each names as prev the
// hash of the receipt before it (the tenant's genesis link for the first),
// so a receipt dropped, inserted, changed or moved shows at the receipt
// after it; no session is receipted twice; and, with keys, every signature
// verifies with one of them. Pure: no clock, no I/O.
func VerifyDeletions(tenant string, receipts [][]byte, keys []ed25519.PublicKey) DeletionsReport {
	r := DeletionsReport{Receipts: len(receipts)}
	prev := events.DeletionGenesis(tenant)
	seen := map[string]uint64{}
	for i, b := range receipts {
		at := uint64(i + 1)
		d, err := events.ParseDeletion(b)
		if err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("receipt %d: %v", at, err))
			prev = events.DeletionHash(b)
			continue
		}
		switch {
		case d.Tenant != tenant:
			r.Problems = append(r.Problems, fmt.Sprintf("receipt %d is of tenant %q, in the deletions log of %q", at, d.Tenant, tenant))
		case d.N != at:
			r.Problems = append(r.Problems, fmt.Sprintf("receipt %d says it is receipt %d: receipts were dropped, inserted or reordered before it", at, d.N))
		}
		if d.Prev != prev {
			what := "the receipt before it was changed, dropped or replaced, or this one moved"
			if at == 1 {
				what = "it does not carry the genesis link of the tenant's deletions log: receipts before it were dropped, or it is another tenant's"
			}
			r.Problems = append(r.Problems, fmt.Sprintf("receipt %d (session %s): prev %s, want %s: %s", at, d.Session, d.Prev, prev, what))
		}
		if first, dup := seen[d.Session]; dup {
			r.Problems = append(r.Problems, fmt.Sprintf("receipt %d receipts session %s again (receipt %d did)", at, d.Session, first))
		}
		seen[d.Session] = at
		if len(keys) > 0 {
			var errs []error
			ok := false
			for _, k := range keys {
				err := d.Verify(k)
				if err == nil {
					ok = true
					break
				}
				errs = append(errs, err)
			}
			if ok {
				r.Signed++
			} else {
				r.Problems = append(r.Problems, fmt.Sprintf("receipt %d (session %s): no given key verifies its signature: %v", at, d.Session, errs[0]))
			}
		}
		prev = events.DeletionHash(b)
	}
	if len(receipts) > 0 {
		r.Head = prev
	}
	return r
}
