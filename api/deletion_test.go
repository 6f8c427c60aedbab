package api

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/replay"
)

// storeCounts counts what the stores hold of one session, read with a raw
// JetStream client on the node's own credentials, apart from the node's
// code: messages on its subjects of the event and snapshot streams, objects
// named TENANT/SESSION/ in the payload and output object stores, its keys
// in the session index, search index, owners index and checkpoint store,
// its workspace directory, and its receipts in the deletions log.
type storeCounts struct {
	Events, Snapshot, Payloads, Outputs, Index, Search, Owners, Checkpoints, Workspace, Receipts int
}

func (c storeCounts) rows() [][2]any {
	return [][2]any{{"event stream messages (CALLSHEET, cs.ev.T.S.>)", c.Events}, {"snapshot messages (CALLSHEET_SNAP)", c.Snapshot},
		{"payloads stored by reference (cs_payloads)", c.Payloads}, {"outputs, images, pre-images (cs_outputs)", c.Outputs},
		{"session index (cs_sessions)", c.Index}, {"search index keys (cs_search)", c.Search}, {"owners index (cs_owners)", c.Owners},
		{"checkpoints (cs_checkpoints)", c.Checkpoints}, {"workspace directory", c.Workspace}, {"deletions log receipts (CALLSHEET_DELETIONS)", c.Receipts}}
}

func countStores(t *testing.T, n *node.Node, tenant, session, workspace string) storeCounts {
	t.Helper()
	js := testnode.JetStream(t, n.ClientURL(), n.NATSCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	messages := func(stream, filter string) int {
		st, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, c := range info.State.Subjects {
			total += int(c)
		}
		return total
	}
	objects := func(bucket string) int {
		obs, err := js.ObjectStore(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		infos, err := obs.List(ctx)
		if errors.Is(err, jetstream.ErrNoObjectsFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, in := range infos {
			if strings.HasPrefix(in.Name, tenant+"/"+session+"/") {
				k++
			}
		}
		return k
	}
	keys := func(bucket string, filters ...string) int {
		kv, err := js.KeyValue(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		l, err := kv.ListKeysFiltered(ctx, filters...)
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for range l.Keys() {
			k++
		}
		return k
	}
	c := storeCounts{
		Events:      messages(natslog.DefaultStream, "cs.ev."+tenant+"."+session+".>"),
		Snapshot:    messages(natslog.DefaultSnapshotStream, "cs.ev_snap."+tenant+"."+session+".>"),
		Payloads:    objects(natslog.DefaultPayloadBucket),
		Outputs:     objects("cs_outputs"),
		Index:       keys(natslog.DefaultIndexBucket, tenant+"."+session),
		Search:      keys(natslog.DefaultSearchBucket, tenant+".s.*."+session, tenant+".m.*.*.*."+session),
		Owners:      keys(cluster.OwnersBucket, tenant+"."+session),
		Checkpoints: keys(natslog.DefaultCheckpointBucket, tenant+"."+session),
		Receipts:    messages(natslog.DefaultDeletionsStream, natslog.DeletionsSubject(tenant, session)),
	}
	if _, err := os.Lstat(workspace); err == nil {
		c.Workspace = 1
	}
	return c
}

// TestDeleteSessionRemovesEveryStore deletes a session that has something
// in every store (events, a snapshot, a payload stored by reference, a
// kept output, a pre-image, index, search and owners entries, a
// checkpoint, a workspace), and checks, with counts read apart from the
// node, that nothing of it is left and that a session beside it lost
// nothing; its routes then answer 404; the receipt names who, when, why
// and the deleted log's last event, and verifies with the node's key. It
// logs the counts before and after.
func TestDeleteSessionRemovesEveryStore(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{"acme": {Tokens: []config.TenantToken{{Token: "tok-admin", Principal: "dpo@acme.example"}}},
		"globex": {Token: "tok-globex"}}
	cfg.ToolOutput.MaxBytes = 1024
	e := newEnv(t, &cfg)
	e.token = "tok-admin"
	victim, other := e.open(), e.open()
	big := strings.Repeat("0123456789abcdef\n", 20_000) // 340 KB: the turn's events go by reference
	for _, s := range []sessionAnswer{victim, other} {
		base := "/v1/sessions/" + s.Session
		e.must("POST", base+"/turns", fmt.Sprintf(`{"id":"t1","calls":[{"id":"w","name":"write","arguments":{"path":"f.txt","content":%q}}]}`, big), http.StatusOK, nil)
		// A pre-image (f.txt overwritten), a kept output (read cut at 1 KiB).
		e.must("POST", base+"/turns", `{"id":"t2","calls":[{"id":"w2","name":"write","arguments":{"path":"f.txt","content":"short"}},{"id":"r","name":"read","arguments":{"path":"f.txt"}},{"id":"r2","name":"glob","arguments":{"pattern":"*"}}]}`, http.StatusOK, nil)
		e.must("POST", base+"/turns", fmt.Sprintf(`{"id":"t3","calls":[{"id":"w3","name":"write","arguments":{"path":"g.txt","content":%q}},{"id":"r3","name":"read","arguments":{"path":"g.txt"}}]}`, big[:5000]), http.StatusOK, nil)
		for range 3 { // a long read makes a snapshot
			e.must("GET", base+"/transcript", "", http.StatusOK, nil)
		}
	}
	before := countStores(t, e.node, "acme", victim.Session, victim.Workspace)
	eventually(t, "the session is in every store", func() error {
		before = countStores(t, e.node, "acme", victim.Session, victim.Workspace)
		for _, r := range before.rows() {
			if r[1].(int) == 0 && !strings.Contains(r[0].(string), "deletions") && !strings.Contains(r[0].(string), "snapshot") {
				return fmt.Errorf("%s: 0", r[0])
			}
		}
		return nil
	})
	// The search index is written behind the log: both sessions ran the same
	// turns, so both are indexed once their counts agree and hold still.
	var otherBefore storeCounts
	eventually(t, "both sessions are indexed", func() error {
		b, o := before, countStores(t, e.node, "acme", other.Session, other.Workspace)
		time.Sleep(200 * time.Millisecond)
		before = countStores(t, e.node, "acme", victim.Session, victim.Workspace)
		otherBefore = countStores(t, e.node, "acme", other.Session, other.Workspace)
		if before != b || otherBefore != o || before.Search != otherBefore.Search {
			return fmt.Errorf("search keys %d and %d, still changing", before.Search, otherBefore.Search)
		}
		return nil
	})
	lastBefore := e.events(victim.Session, "")
	// A followed stream of the session, open across its deletion.
	resp, err := http.DefaultClient.Do(e.request("GET", "/v1/sessions/"+victim.Session+"/events", ""))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("follow: %v %v", err, resp)
	}
	streamEnded := make(chan struct{})
	go func() {
		defer close(streamEnded)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()

	var ans DeleteAnswer
	e.must("DELETE", "/v1/sessions/"+victim.Session, "", http.StatusOK, &ans)
	after := countStores(t, e.node, "acme", victim.Session, victim.Workspace)
	select {
	case <-streamEnded:
	case <-time.After(10 * time.Second):
		t.Error("the followed event stream of the deleted session is still open")
	}
	want := storeCounts{Receipts: 1}
	if after != want {
		t.Errorf("after the deletion the stores hold %+v, want nothing but the receipt", after)
	}
	if got := countStores(t, e.node, "acme", other.Session, other.Workspace); got != otherBefore {
		t.Errorf("the other session: %+v after, %+v before", got, otherBefore)
	}
	var table strings.Builder
	table.WriteString("| store | before | after |\n|---|---|---|\n")
	for i, r := range before.rows() {
		fmt.Fprintf(&table, "| %s | %d | %d |\n", r[0], r[1], after.rows()[i][1])
	}
	t.Logf("session %s, stores before and after DELETE:\n%s\nremoved (the node's count): %+v", victim.Session, table.String(), ans.Removed)

	// The receipt.
	d, err := events.ParseDeletion(ans.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := base64.StdEncoding.DecodeString(ans.PublicKey)
	if err := d.Verify(ed25519.PublicKey(pub)); err != nil {
		t.Fatal(err)
	}
	last := lastBefore[len(lastBefore)-1]
	if d.Tenant != "acme" || d.Session != victim.Session || d.By != "dpo@acme.example" || d.Reason != events.DeletedOnRequest || d.N != 1 || d.Prev != events.DeletionGenesis("acme") {
		t.Errorf("receipt %+v", d)
	}
	if d.LastSeq <= last.Seq || d.Closed.IsZero() {
		t.Errorf("receipt names seq %d (closed %v), want the close after seq %d: the API closes the session first", d.LastSeq, d.Closed, last.Seq)
	}
	t.Logf("receipt: %s", ans.Receipt)

	// Its routes are 404; the list does not hold it; DELETE again says when
	// it was deleted.
	base := "/v1/sessions/" + victim.Session
	for _, rt := range []struct{ method, path, body string }{
		{"GET", base, ""}, {"GET", base + "/transcript", ""}, {"GET", base + "/events?follow=false", ""}, {"GET", base + "/events", ""},
		{"GET", base + "/timeline", ""}, {"GET", base + "/turns/t1", ""}, {"GET", base + "/approvals", ""},
		{"POST", base + "/turns", `{"calls":[{"id":"c","name":"todo_get","arguments":{}}]}`}, {"POST", base + "/sign", ""},
		{"POST", base + "/close", ""}, {"POST", base + "/rewind", `{"call":"w2"}`},
	} {
		status, b := e.do(rt.method, rt.path, rt.body)
		if status != http.StatusNotFound || !strings.Contains(string(b), "was deleted at ") || !strings.Contains(string(b), "dpo@acme.example") {
			t.Errorf("%s %s after the deletion: %d %s, want 404 saying when and by whom", rt.method, rt.path, status, b)
		}
	}
	status, b := e.do("DELETE", base, "")
	wantError(t, status, b, http.StatusNotFound, CodeNotFound, "was deleted", "dpo@acme.example", "receipt 1")
	// Another tenant asking for the id learns nothing of acme's deletion.
	e.as("tok-globex", func() {
		status, b := e.do("GET", base, "")
		if status != http.StatusNotFound || strings.Contains(string(b), "deleted") || strings.Contains(string(b), "dpo@") {
			t.Errorf("globex GET of acme's deleted session: %d %s, want a plain 404", status, b)
		}
	})
	var list SessionList
	e.poll("/v1/sessions", func(b []byte) bool { return json.Unmarshal(b, &list) == nil && len(list.Sessions) == 1 })
	if list.Sessions[0].Session != other.Session {
		t.Fatalf("listed %+v, want the other session only", list.Sessions)
	}
	var page DeletionsPage
	e.must("GET", "/v1/deletions", "", http.StatusOK, &page)
	if len(page.Deletions) != 1 || string(page.Deletions[0]) != string(ans.Receipt) {
		t.Fatalf("GET /v1/deletions: %+v, want the receipt as stored", page)
	}
	if events.DeletionHash(page.Deletions[0]) == "" {
		t.Fatal("no hash")
	}
	if _, err := os.Stat(filepath.Join(other.Workspace, "f.txt")); err != nil {
		t.Fatalf("the other session's workspace: %v", err)
	}
}

// TestDeleteCancelsARunningTurn deletes a session while its turn runs: a
// harness call held by a worker, and a question waiting for it. The
// turn is cancelled first (the worker's next heartbeat is told to stop),
// then the session closed and deleted; the receipt names the close.
func TestDeleteCancelsARunningTurn(t *testing.T) {
	e := newEnv(t, nil)
	e.must("PUT", "/v1/tools/lookup", spec(`, "heartbeat_timeout": "30s", "timeout": "60s"`), http.StatusOK, nil)
	s := e.open()
	base := "/v1/sessions/" + s.Session
	e.must("POST", base+"/turns?wait=0", `{"id":"t1","calls":[{"id":"h","name":"lookup","arguments":{"order":"o1"}},{"id":"q","name":"question","arguments":{"question":"which?"}}]}`, http.StatusAccepted, nil)
	task := e.takeOne("lookup")
	var ans DeleteAnswer
	e.must("DELETE", base, "", http.StatusOK, &ans)
	d, err := events.ParseDeletion(ans.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	if d.By != LocalPrincipal || d.Closed.IsZero() {
		t.Fatalf("receipt %+v: want the local principal and the close", d)
	}
	status, b := e.do("POST", "/v1/tasks/"+task.Task+"/heartbeat", "")
	if status != http.StatusConflict && !(status == http.StatusOK && strings.Contains(string(b), `"cancel":true`)) {
		t.Fatalf("the worker's heartbeat after the deletion: %d %s, want it told to stop", status, b)
	}
	if status, b := e.do("GET", base+"/turns/t1", ""); status != http.StatusNotFound {
		t.Fatalf("the turn after the deletion: %d %s", status, b)
	}
	if _, err := os.Stat(s.Workspace); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("workspace %s: %v, want it removed", s.Workspace, err)
	}
}

// TestDeleteKeepsASharedWorkspace: a session whose workspace another
// session works in (or inside) is deleted, and the workspace stays, with
// the answer saying why.
func TestDeleteKeepsASharedWorkspace(t *testing.T) {
	e := newEnv(t, nil)
	var a, b sessionAnswer
	e.must("POST", "/v1/sessions", `{"workspace":"shared"}`, http.StatusCreated, &a)
	e.must("POST", "/v1/sessions", `{"workspace":"shared/sub"}`, http.StatusCreated, &b)
	var ans DeleteAnswer
	e.must("DELETE", "/v1/sessions/"+a.Session, "", http.StatusOK, &ans)
	if !strings.Contains(ans.Removed.Workspace, "kept: session "+b.Session) {
		t.Fatalf("workspace: %q, want it kept for %s", ans.Removed.Workspace, b.Session)
	}
	if _, err := os.Stat(b.Workspace); err != nil {
		t.Fatal(err)
	}
	e.must("DELETE", "/v1/sessions/"+b.Session, "", http.StatusOK, &ans)
	if ans.Removed.Workspace != "removed" {
		t.Fatalf("the last session of the workspace: %q, want it removed", ans.Removed.Workspace)
	}
}

// TestRetentionInAFleet: a tenant's retention deletes its closed sessions
// once they have been closed that long, on a fleet of two nodes each
// sweeping every 300 ms (and twice more at once, racing): every closed
// session is deleted once, by the node that owns it, with a receipt by
// retention; the open ones stay; the deletions log verifies. A DELETE
// sent to the node that does not own a session is served by its owner.
func TestRetentionInAFleet(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "tok-acme", Retention: config.Duration(2 * time.Second)}, "globex": {Token: "tok-globex"}}
	// No checkpoints: a closed session's actor released at shutdown makes
	// a checkpoint the closing fleet cannot write, and Close would wait 30 s.
	fl := newFleetAs(t, 2, &cfg, "tok-acme", func(_ string, o *node.Options) { o.RetentionSweep, o.CheckpointInterval = 300*time.Millisecond, -1 })
	var closed, open []string
	for i := range 8 {
		fn := fl[i%2]
		var s sessionAnswer
		fn.must("POST", "/v1/sessions", `{}`, http.StatusCreated, &s)
		fn.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"calls":[{"id":"w","name":"write","arguments":{"path":"a.txt","content":"A"}}]}`, http.StatusOK, nil)
		if i < 6 {
			fn.must("POST", "/v1/sessions/"+s.Session+"/close", "", http.StatusOK, nil)
			closed = append(closed, s.Session)
		} else {
			open = append(open, s.Session)
		}
	}
	// A session of a tenant without retention is kept, closed or not.
	fl[0].token = "tok-globex"
	var kept sessionAnswer
	fl[0].must("POST", "/v1/sessions", `{}`, http.StatusCreated, &kept)
	fl[0].must("POST", "/v1/sessions/"+kept.Session+"/close", "", http.StatusOK, nil)
	fl[0].token = "tok-acme"
	// Two more sweeps on each node at once, racing the goroutines'.
	time.Sleep(2500 * time.Millisecond)
	var wg sync.WaitGroup
	for _, fn := range fl {
		for range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); fn.node.Sweep(context.Background()) }()
		}
	}
	wg.Wait()
	var page DeletionsPage
	eventually(t, "every closed session is deleted", func() error {
		fl[1].must("GET", "/v1/deletions", "", http.StatusOK, &page)
		if len(page.Deletions) < len(closed) {
			return fmt.Errorf("%d receipts", len(page.Deletions))
		}
		return nil
	})
	time.Sleep(time.Second) // a late duplicate would land now
	fl[0].must("GET", "/v1/deletions", "", http.StatusOK, &page)
	pub, _ := base64.StdEncoding.DecodeString(page.PublicKey)
	var receipts [][]byte
	byNode := map[string]int{}
	var deleted []string
	for _, r := range page.Deletions {
		receipts = append(receipts, r)
		d, err := events.ParseDeletion(r)
		if err != nil {
			t.Fatal(err)
		}
		if d.By != events.RetentionPrincipal || d.Reason != events.DeletedByRetention || d.Closed.IsZero() {
			t.Errorf("receipt %s", r)
		}
		byNode[d.Node]++
		deleted = append(deleted, d.Session)
	}
	slices.Sort(deleted)
	slices.Sort(closed)
	if !slices.Equal(deleted, closed) {
		t.Fatalf("receipted %v, want each closed session once: %v", deleted, closed)
	}
	// Each test node made its own key (a fleet is given one: --signing-key).
	k1, _ := fl[0].node.SigningKey()
	k2, _ := fl[1].node.SigningKey()
	if !slices.Equal(pub, k1) && !slices.Equal(pub, k2) {
		t.Fatalf("the answer's public key is neither node's")
	}
	if rep := replay.VerifyDeletions("acme", receipts, []ed25519.PublicKey{k1, k2}); !rep.OK() || rep.Signed != len(closed) {
		t.Fatalf("the deletions log: %v", rep.Problems)
	}
	if byNode["n1"] == 0 || byNode["n2"] == 0 {
		t.Errorf("receipts by node %v: want each node to delete the sessions it owns", byNode)
	}
	for _, fn := range fl {
		for _, s := range closed {
			if code, b := fn.do("GET", "/v1/sessions/"+s, ""); code != http.StatusNotFound {
				t.Errorf("%s: deleted session %s: %d %s", fn.name, s, code, b)
			}
		}
		for _, s := range open {
			if code, b := fn.do("GET", "/v1/sessions/"+s, ""); code != http.StatusOK {
				t.Errorf("%s: open session %s: %d %s", fn.name, s, code, b)
			}
		}
	}
	fl[0].token = "tok-globex"
	if code, b := fl[0].do("GET", "/v1/sessions/"+kept.Session, ""); code != http.StatusOK {
		t.Errorf("globex's closed session: %d %s", code, b)
	}
	t.Logf("retention 2s, two nodes sweeping every 300 ms and twice more at once: %d closed sessions, %d receipts, by node %v; the deletions log verifies", len(closed), len(page.Deletions), byNode)

	// DELETE through the node that does not own the session: its owner
	// deletes it (the open session's running state is closed first).
	fl[0].token = "tok-acme"
	code, body, by := fl[1].served("DELETE", "/v1/sessions/"+open[0], "")
	if code != http.StatusOK || by != "n1" {
		t.Fatalf("DELETE through n2 of a session n1 owns: %d (served by %q) %s", code, by, body)
	}
	var ans DeleteAnswer
	_ = json.Unmarshal(body, &ans)
	if d, err := events.ParseDeletion(ans.Receipt); err != nil || d.Reason != events.DeletedOnRequest || d.By != "acme" || d.Node != "n1" || d.N != uint64(len(closed)+1) {
		t.Fatalf("receipt %s: %v", ans.Receipt, err)
	}
	for _, fn := range fl {
		if code, b := fn.do("GET", "/v1/sessions/"+open[0]+"/transcript", ""); code != http.StatusNotFound {
			t.Errorf("%s: the deleted session's transcript: %d %s", fn.name, code, b)
		}
	}
}

// TestDeleteIsTenantScoped: a tenant's admin token cannot delete another
// tenant's session (404, nothing removed), nor read its receipts; a
// session id that is not one is refused.
func TestDeleteIsTenantScoped(t *testing.T) {
	e := twoTenants(t)
	s := e.open() // acme's
	e.must("DELETE", "/v1/sessions/"+e.open().Session, "", http.StatusOK, nil)
	e.as("tok-globex", func() {
		for _, path := range []string{"/v1/sessions/" + s.Session, "/v1/sessions/..%2Facme%2F" + s.Session, "/v1/sessions/" + s.Session + "%00"} {
			status, b := e.do("DELETE", path, "")
			if status != http.StatusNotFound && status != http.StatusBadRequest {
				t.Errorf("globex DELETE %s: %d %s, want 404 or 400", path, status, b)
			}
		}
		var page DeletionsPage
		e.must("GET", "/v1/deletions", "", http.StatusOK, &page)
		if page.Tenant != "globex" || len(page.Deletions) != 0 {
			t.Errorf("globex's deletions log: %+v, want its own, empty", page)
		}
	})
	e.must("GET", "/v1/sessions/"+s.Session+"/transcript", "", http.StatusOK, nil)
	if _, err := os.Stat(s.Workspace); err != nil {
		t.Fatalf("acme's workspace: %v", err)
	}
}
