package natslog_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/replay"
)

// TestDeletionsAppendOncePerSession: four writers on connections of their
// own (nodes of a fleet) race to receipt the same twenty sessions of a
// tenant, and another tenant's meanwhile. Each session is receipted once,
// every writer is told of the one receipt (its own or the winner's), and
// each tenant's log is one chain that verifies.
func TestDeletionsAppendOncePerSession(t *testing.T) {
	e := startServer(t)
	pub, key, _ := ed25519.GenerateKey(nil)
	var logs []*natslog.Deletions
	for range 4 {
		l := openLog(t, e)
		d, err := l.Deletions(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const sessions = 20
	got := make([][]string, len(logs)) // per writer: the receipt each session got
	var wg sync.WaitGroup
	for w, d := range logs {
		got[w] = make([]string, sessions)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range sessions {
				for _, tenant := range []string{"acme", "globex"} {
					session := fmt.Sprintf("S%02d", i)
					st, _, err := d.Append(ctx, tenant, session, func(prev string, n uint64) ([]byte, error) {
						return events.Deletion{Tenant: tenant, Session: session, N: n, Prev: prev, Deleted: time.Now().UTC(),
							By: fmt.Sprintf("writer-%d", w), Reason: events.DeletedByRetention}.Sign(key).Encode(), nil
					})
					if err != nil {
						t.Error(err)
						return
					}
					if tenant == "acme" {
						got[w][i] = string(st.Data)
					}
				}
			}
		}()
	}
	wg.Wait()
	for i := range sessions {
		for w := range logs {
			if got[w][i] != got[0][i] {
				t.Fatalf("session S%02d: writer %d was told of %s, writer 0 of %s", i, w, got[w][i], got[0][i])
			}
		}
	}
	for _, tenant := range []string{"acme", "globex"} {
		list, err := logs[1].List(ctx, tenant, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var receipts [][]byte
		for _, s := range list {
			receipts = append(receipts, s.Data)
		}
		r := replay.VerifyDeletions(tenant, receipts, []ed25519.PublicKey{pub})
		if len(receipts) != sessions || !r.OK() || r.Signed != sessions {
			t.Fatalf("tenant %s: %d receipts, %+v", tenant, len(receipts), r)
		}
		// Paging skips what was read.
		page, err := logs[2].List(ctx, tenant, 15, 3)
		if err != nil || len(page) != 3 || string(page[0].Data) != string(receipts[15]) {
			t.Fatalf("List after 15, 3: %d %v", len(page), err)
		}
	}
}
