package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestOneActivity starts the dev server as the bench does (tuned, fsync
// at every commit) and completes one standalone activity and one workflow
// running it: the peer's whole path, with real gRPC, persistence and
// worker. Run by hand: `cd bench/peers && go test ./...` (it is its own
// module; the main module's tests never build it).
func TestOneActivity(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	s, err := settingNamed("tuned-fsync")
	if err != nil {
		t.Fatal(err)
	}
	p, err := StartPeer(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.Activity(ctx); err != nil {
		t.Fatalf("standalone activity: %v", err)
	}
	if err := p.Workflow(ctx); err != nil {
		t.Fatalf("workflow: %v", err)
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{name: "defaults"},
		{name: "subset", args: []string{"-settings", "tuned-fsync", "-shapes", "activity", "-throughput", "", "-concurrency", "1,4"}},
		{name: "unknown setting", args: []string{"-settings", "fast"}, wantErr: true},
		{name: "unknown shape", args: []string{"-shapes", "saga"}, wantErr: true},
		{name: "bad concurrency", args: []string{"-concurrency", "1,x"}, wantErr: true},
		{name: "zero calls", args: []string{"-calls", "0"}, wantErr: true},
		{name: "stray argument", args: []string{"now"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NewMain(io.Discard, io.Discard).ParseFlags(tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
		})
	}
}
