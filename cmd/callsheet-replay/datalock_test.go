package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/internal/datalock"
	"github.com/callsheet/callsheet/internal/testnode"
)

// TestReplayDataOfARunningNodeProcess: replay --data DIR --session S works
// while a node process runs on DIR, without being told the embedded
// server's port: the node's lock record names it and the credentials.
func TestReplayDataOfARunningNodeProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a node process")
	}
	data := filepath.Join(t.TempDir(), "data")
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: data})
	var s struct{ Session string }
	if code, err := p.Do("POST", "/v1/sessions", nil, &s); err != nil || code != http.StatusCreated {
		t.Fatalf("open session: %d %v", code, err)
	}
	if code, err := p.Do("POST", "/v1/sessions/"+s.Session+"/turns", `{"id":"t1","calls":[{"id":"w","name":"write","arguments":{"path":"a.txt","content":"hi"}}]}`, nil); err != nil || code != http.StatusOK {
		t.Fatalf("turn: %d %v", code, err)
	}
	var want []byte
	if code, err := p.Do("GET", "/v1/sessions/"+s.Session+"/transcript", nil, &want); err != nil || code != http.StatusOK {
		t.Fatalf("transcript: %d %v", code, err)
	}

	m := NewMain()
	var out, stderr bytes.Buffer
	m.Stdout, m.Stderr = &out, &stderr
	if err := m.ParseFlags([]string{"--data", data, "--session", s.Session, "--format", "json"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatalf("replay --data of a running node: %v", err)
	}
	if out.String() != string(want) {
		t.Fatalf("replay:\n%s\nwant the API's transcript:\n%s", out.String(), want)
	}
	note := fmt.Sprintf("is in use by callsheet-node %q (pid %d", p.Name, p.PID())
	if p.Name == "" {
		note = fmt.Sprintf("(pid %d", p.PID())
	}
	if !strings.Contains(stderr.String(), note) || !strings.Contains(stderr.String(), "reading through its embedded JetStream at nats://127.0.0.1:") {
		t.Errorf("stderr %q: want a note naming the node (%s) and its server", stderr.String(), note)
	}
	// The node kept serving, and still holds its directory.
	if code, err := p.Do("GET", "/v1/sessions/"+s.Session, nil, nil); err != nil || code != http.StatusOK {
		t.Fatalf("node after the replay: %d %v", code, err)
	}
	if err := datalock.Check(data); err == nil {
		t.Fatal("the node's lock was lost to the replay")
	}
}

// TestReplayRefusesAStoreInUse: replay keeps refusing to open a store
// another process has open: one holding the lock without a server to read
// through (another replay), and one holding the store's files without the
// lock (a program embedding a server on it).
func TestReplayRefusesAStoreInUse(t *testing.T) {
	dir := t.TempDir()
	n, sess, _ := session(t, dir)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := datalock.Acquire(dir, datalock.Record{Program: datalock.ProgramReplay})
	if err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "--session", sess, "--data", dir)
	if err == nil || !strings.Contains(err.Error(), "in use by callsheet-replay (pid ") || !strings.Contains(err.Error(), "when it has ended") {
		t.Errorf("store locked by another replay: err=%v, want a refusal naming it", err)
	}
	l.Release()

	srv, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: filepath.Join(dir, "jetstream"), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	// A write, so the server holds a block file of the store open.
	nc, err := srv.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "--session", sess, "--data", dir)
	if err == nil || !strings.Contains(err.Error(), "in use by process") || !strings.Contains(err.Error(), "--nats") {
		t.Errorf("store open without the lock: err=%v, want the refusal naming --nats", err)
	}
}
