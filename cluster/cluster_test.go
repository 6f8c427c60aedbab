package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/internal/testenv"
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

// TestTakenPortIsNamed: a server whose client or route port another process
// holds fails to start at once, saying which port and why, instead of
// waiting out ReadyTimeout and saying only that it was not ready.
func TestTakenPortIsNamed(t *testing.T) {
	for _, route := range []bool{false, true} {
		name := map[bool]string{false: "client", true: "route"}[route]
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			opts := cluster.EmbeddedOptions{StoreDir: t.TempDir(), Port: port}
			if route {
				creds, err := cluster.NewCredentials()
				if err != nil {
					t.Fatal(err)
				}
				opts.Port, opts.Credentials = 0, creds
				opts.ClusterListen = fmt.Sprintf("127.0.0.1:%d", port)
				opts.Routes = []string{fmt.Sprintf("nats-route://127.0.0.1:%d", port)}
			}
			start := time.Now()
			e, err := cluster.StartEmbedded(opts)
			if err == nil {
				e.Shutdown()
				t.Fatalf("started on a %s port another listener holds", name)
			}
			if took := time.Since(start); took > cluster.ReadyTimeout/2 {
				t.Errorf("the refusal took %s, want well under ReadyTimeout (%s)", took, cluster.ReadyTimeout)
			}
			if msg := err.Error(); !strings.Contains(msg, strconv.Itoa(port)) || !strings.Contains(msg, "address already in use") {
				t.Errorf("error %q does not name the port %d and that it is in use", msg, port)
			}
		})
	}
}

// TestServerErrorsReachTheLog: what the embedded server reports as an error
// (here a client refused its credentials) reaches the node's log, marked as
// the server's; its start notices do not at the info level.
func TestServerErrorsReachTheLog(t *testing.T) {
	var buf testenv.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir(), Logger: logger})
	if nc, err := nats.Connect(e.ClientURL(), nats.MaxReconnects(0), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected")
	}
	for end := time.Now().Add(5 * time.Second); !strings.Contains(buf.String(), "authentication error"); {
		if time.Now().After(end) {
			t.Fatalf("the server's refusal is not in the node's log: %q", buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	line := ""
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "authentication error") {
			line = l
		}
	}
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "nats-server:") {
		t.Fatalf("the refusal's line %q: want level=ERROR and the server named", line)
	}
	if strings.Contains(buf.String(), "Starting nats-server") {
		t.Fatalf("the server's start notices reached the log at info level: %q", buf.String())
	}
}
