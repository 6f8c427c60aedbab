package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
)

func start(t *testing.T, opts cluster.EmbeddedOptions) *cluster.Embedded {
	t.Helper()
	e, err := cluster.StartEmbedded(opts)
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

func TestDataSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	for _, syncAlways := range []bool{false, true} {
		e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: dir, SyncAlways: syncAlways})
		if err != nil {
			t.Fatalf("StartEmbedded: %v", err)
		}
		nc, err := e.Connect("test")
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}); err != nil {
			t.Fatalf("create stream: %v", err)
		}
		if _, err := js.Publish(ctx, "s.a", []byte("hello")); err != nil {
			t.Fatalf("publish: %v", err)
		}
		nc.Close()
		e.Shutdown()
	}

	e := start(t, cluster.EmbeddedOptions{StoreDir: dir})
	nc, err := cluster.Connect(e.ClientURL(), "test-tcp", e.Credentials().Option())
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.State.Msgs, uint64(2); got != want {
		t.Fatalf("msgs after restart=%d, want %d", got, want)
	}
	m, err := s.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "hello" {
		t.Fatalf("data=%q, want %q", m.Data, "hello")
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    cluster.EmbeddedOptions
		wantErr error
	}{
		{name: "no store dir", opts: cluster.EmbeddedOptions{}, wantErr: cluster.ErrInvalidOption},
		{name: "bad port", opts: cluster.EmbeddedOptions{StoreDir: "x", Port: 70000}, wantErr: cluster.ErrInvalidOption},
		{name: "ok", opts: cluster.EmbeddedOptions{StoreDir: "x", Port: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.opts.Validate(); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Validate()=%v, want %v", err, tt.wantErr)
			}
		})
	}
	if got := (cluster.EmbeddedOptions{SyncAlways: true}).Durability(); got != cluster.DurabilityFsync {
		t.Fatalf("durability=%q, want %q", got, cluster.DurabilityFsync)
	}
}

func TestConnectEmptyURL(t *testing.T) {
	if _, err := cluster.Connect("", "x"); err == nil {
		t.Fatal("Connect(\"\") succeeded, want an error")
	}
}
