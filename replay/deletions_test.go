package replay

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
)

// deletionsLog builds a tenant's deletions log of n receipts signed with
// key, chained as natslog.Deletions.Append chains them.
func deletionsLog(t *testing.T, key ed25519.PrivateKey, tenant string, n int) [][]byte {
	t.Helper()
	var out [][]byte
	prev := events.DeletionGenesis(tenant)
	for i := range n {
		d := events.Deletion{Tenant: tenant, Session: "S" + string(rune('A'+i)), N: uint64(i + 1), Prev: prev,
			Deleted: time.Date(2026, 12, 1, 9, 0, i, 0, time.UTC), By: "dpo", Reason: events.DeletedOnRequest,
			Chain: events.Chain2, LastSeq: 10, LastHash: strings.Repeat("ab", 32)}.Sign(key)
		b := d.Encode()
		out = append(out, b)
		prev = events.DeletionHash(b)
	}
	return out
}

// TestVerifyDeletionsNamesTheChange: an intact log verifies; a receipt
// changed, dropped, inserted, moved, receipted twice, of another tenant, or
// signed with another key is named.
func TestVerifyDeletionsNamesTheChange(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	otherPub, otherKey, _ := ed25519.GenerateKey(nil)
	log := deletionsLog(t, key, "acme", 4)
	clone := func() [][]byte {
		out := make([][]byte, len(log))
		for i, b := range log {
			out[i] = bytes.Clone(b)
		}
		return out
	}
	if r := VerifyDeletions("acme", log, []ed25519.PublicKey{pub}); !r.OK() || r.Signed != 4 || r.Head != events.DeletionHash(log[3]) {
		t.Fatalf("intact log: %+v", r)
	}
	if r := VerifyDeletions("acme", nil, nil); !r.OK() || r.Head != "" {
		t.Fatalf("empty log: %+v", r)
	}
	for _, tt := range []struct {
		name string
		log  func() [][]byte
		keys []ed25519.PublicKey
		want string
	}{
		{"a receipt's who changed", func() [][]byte {
			l := clone()
			l[1] = bytes.Replace(l[1], []byte(`"by":"dpo"`), []byte(`"by":"eve"`), 1)
			return l
		}, []ed25519.PublicKey{pub}, "receipt 2 (session SB): no given key verifies"},
		{"a receipt changed and re-signed by another key", func() [][]byte {
			l := clone()
			d, _ := events.ParseDeletion(l[1])
			d.By = "eve"
			l[1] = d.Sign(otherKey).Encode()
			return l
		}, []ed25519.PublicKey{pub}, "receipt 3 (session SC): prev"},
		{"a receipt dropped", func() [][]byte { l := clone(); return append(l[:1], l[2:]...) }, nil, "receipt 2 says it is receipt 3"},
		{"the first receipts dropped", func() [][]byte { return clone()[2:] }, nil, "genesis link"},
		{"receipts swapped", func() [][]byte { l := clone(); l[1], l[2] = l[2], l[1]; return l }, nil, "receipt 2 says it is receipt 3"},
		{"another tenant's log", func() [][]byte { return clone() }, nil, `is of tenant "acme", in the deletions log of "globex"`},
		{"a key nobody gave", func() [][]byte { return clone() }, []ed25519.PublicKey{otherPub}, "not with the given key"},
		{"not a receipt", func() [][]byte { l := clone(); l[2] = []byte(`{"kind":"x"}`); return l }, nil, "receipt 3: events: bad deletion receipt"},
		{"a session receipted twice", func() [][]byte {
			l := clone()
			d, _ := events.ParseDeletion(l[3])
			d.Session = "SA"
			l[3] = d.Sign(key).Encode()
			return l
		}, nil, "receipts session SA again (receipt 1 did)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tenant := "acme"
			if strings.Contains(tt.name, "another tenant") {
				tenant = "globex"
			}
			r := VerifyDeletions(tenant, tt.log(), tt.keys)
			if r.OK() || !strings.Contains(strings.Join(r.Problems, "\n"), tt.want) {
				t.Fatalf("problems %q, want one saying %q", r.Problems, tt.want)
			}
		})
	}
}
