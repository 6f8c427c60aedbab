package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/internal/testenv"
)

// logLines collects what a server or lease logs, for a test to look for.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(b))
	return len(b), nil
}

// logger logs into l, as text.
func (l *logLines) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func (l *logLines) has(sub string) bool { return l.count(sub) > 0 }

// count is how many lines hold sub.
func (l *logLines) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestEmbeddedStoreTakesWritesAgainOnceSpaceIsFreed: an embedded server's
// store fills to ENOSPC (a writer from outside, on a 16 MiB file system):
// a stream's writes fail and StoreFault says why. Once the space is freed
// the server takes that stream's writes again within seconds, without a
// restart of the process, and keeps what it had acknowledged; the log says
// what happened.
func TestEmbeddedStoreTakesWritesAgainOnceSpaceIsFreed(t *testing.T) {
	disk := testenv.SmallDisk(t, 16)
	var log logLines
	e := start(t, cluster.EmbeddedOptions{StoreDir: filepath.Join(disk, "js"), SyncAlways: true, Logger: log.logger(), StoreRoom: 4 << 20})
	js := jsOf(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	publish := func() error {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := js.Publish(c, "ev.x", make([]byte, 4096))
		return err
	}
	if err := publish(); err != nil {
		t.Fatal(err)
	}
	acked := 1

	fill := filepath.Join(disk, "fill")
	if out, _ := exec.Command("dd", "if=/dev/zero", "of="+fill, "bs=1M").CombinedOutput(); !strings.Contains(string(out), "No space left") {
		t.Fatalf("dd did not fill the disk: %s", out)
	}
	for i := 0; ; i++ {
		if publish() != nil {
			break
		}
		acked++
		if i > 1000 {
			t.Fatal("a full disk still takes every write")
		}
	}
	var fault error
	for deadline := time.Now().Add(10 * time.Second); fault == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		fault = e.StoreFault()
	}
	if !errors.Is(fault, cluster.ErrStoreFault) || !strings.Contains(fault.Error(), "no space left") {
		t.Fatalf("StoreFault on a full disk: %v, want ErrStoreFault naming ENOSPC", fault)
	}
	// Still full: nothing is restarted, and writes still fail.
	time.Sleep(3 * cluster.HealEvery)
	if publish() == nil {
		t.Fatal("a write succeeded while the disk is still full")
	}

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	for publish() != nil {
		if time.Since(freed) > 15*time.Second {
			t.Fatalf("15 s after the space was freed the stream still refuses writes (StoreFault: %v); log:\n%s", e.StoreFault(), log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("writes taken again %s after the space was freed", time.Since(freed).Round(time.Millisecond))
	acked++
	if err := e.StoreFault(); err != nil {
		t.Errorf("StoreFault after the restart: %v", err)
	}
	st, err := js.Stream(ctx, "EV")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs < uint64(acked) {
		t.Errorf("the stream holds %d messages, want at least the %d acknowledged", info.State.Msgs, acked)
	}
	for _, want := range []string{"does not take writes", "no space left", "restarted JetStream from its store"} {
		if !log.has(want) {
			t.Errorf("the server's log does not say %q:\n%s", want, log.String())
		}
	}
}

// TestClusteredServerStartsJetStreamAgain: one server of three shuts its
// JetStream down, as nats-server does when a clustered server runs out of
// space. StoreFault says so, and with room on its disk the server starts
// JetStream again within seconds, rejoins the cluster and serves the
// replicated stream again, without a restart of the process.
func TestClusteredServerStartsJetStreamAgain(t *testing.T) {
	creds, err := cluster.NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	var log logLines
	srvs := startCluster(t, creds, []string{filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")}, nil,
		func(i int, o *cluster.EmbeddedOptions) {
			if i == 2 {
				o.Logger = log.logger()
			}
		})
	js0 := jsOf(t, srvs[0])
	retry(t, "create R3 stream", func(ctx context.Context) error {
		_, err := js0.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage, Replicas: 3})
		return err
	})
	retry(t, "publish", func(ctx context.Context) error {
		_, err := js0.Publish(ctx, "s.x", []byte("before"))
		return err
	})
	c := srvs[2]
	const restarted = "restarted JetStream from its store"
	before := log.count(restarted) // its start may have been one
	if err := c.Server().ShutdownJetStream(); err != nil {
		t.Fatal(err)
	}
	if err := c.StoreFault(); !errors.Is(err, cluster.ErrStoreFault) {
		t.Fatalf("StoreFault of a server whose JetStream is shut down: %v", err)
	}
	shut := time.Now()
	// Until a restart has returned and JetStream takes writes, nothing
	// asks the server: nats-server 2.15 serves JetStream's API before its
	// restart has set the meta group up, and reads it unguarded
	// (jsStreamInfoRequest against setupMetaGroup: a data race of its own,
	// which the race detector reports in this process). A shutdown that
	// first hands the meta leadership on may outlast the healer's first
	// look, so a restart may come before the shutdown is done.
	for log.count(restarted) == before || c.StoreFault() != nil {
		if time.Since(shut) > 15*time.Second {
			t.Fatalf("JetStream was not started again within 15 s:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("JetStream started again %s after it was shut down", time.Since(shut).Round(time.Millisecond))
	jsc := jsOf(t, c)
	retry(t, "publish through the server that started again", func(ctx context.Context) error {
		_, err := jsc.Publish(ctx, "s.x", []byte("after"))
		return err
	})
	retry(t, "the stream through it", func(ctx context.Context) error {
		s, err := jsc.Stream(ctx, "S")
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 2 || info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("%d messages, cluster %+v", info.State.Msgs, info.Cluster)
		}
		return nil
	})
	if err := c.StoreFault(); err != nil {
		t.Errorf("StoreFault after the start: %v\n%s", err, log.String())
	}
}
