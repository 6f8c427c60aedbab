package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/replay"
)

// Checkpoints and the witness (docs/audit.md, "Checkpoints and the
// witness"): --verify reads the session's latest checkpoint from the
// checkpoint store (or the API) and, with --witness FILE, every checkpoint
// a witness file holds for it; --witness FILE without --verify follows the
// tenant's checkpoints and appends each new one to FILE, a line of JSON,
// away from NATS.

// storeName says where a checkpoint read through the log came from.
const storeName = "the checkpoint store " + natslog.DefaultCheckpointBucket

// checkpointsOf returns the session's checkpoints the source holds; none
// (and no error) when it keeps none.
func (s *logSource) checkpoints(ctx context.Context, session string) ([]replay.Checkpoint, error) {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	store, err := natslog.OpenCheckpoints(ctx, js)
	if errors.Is(err, natslog.ErrNoCheckpoints) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	cp, ok, err := store.Get(ctx, s.m.Tenant, session)
	if err != nil || !ok {
		return nil, err
	}
	return []replay.Checkpoint{{Checkpoint: cp, From: storeName}}, nil
}

// follow delivers the tenant's checkpoints (the session's, when not "").
func (s *logSource) follow(ctx context.Context, session string) (<-chan events.Checkpoint, error) {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	store, err := natslog.OpenCheckpoints(ctx, js)
	if err != nil {
		return nil, err
	}
	// A store opened from --data belongs to a stopped node: nothing new
	// comes.
	return store.Watch(ctx, s.m.Tenant, session, s.m.NATSURL != "")
}

func (s *apiSource) checkpoints(ctx context.Context, session string) ([]replay.Checkpoint, error) {
	ch, err := s.checkpointStream(ctx, session, false)
	if err != nil {
		var nf notFound
		if errors.As(err, &nf) {
			return nil, nil // a node that keeps none
		}
		return nil, err
	}
	var out []replay.Checkpoint
	for cp := range ch {
		out = append(out, replay.Checkpoint{Checkpoint: cp, From: "the node's checkpoints (" + s.base.String() + ")"})
	}
	return out, nil
}

func (s *apiSource) follow(ctx context.Context, session string) (<-chan events.Checkpoint, error) {
	return s.checkpointStream(ctx, session, true)
}

// notFound is an API answer 404.
type notFound struct{ error }

// checkpointStream reads GET /v1/checkpoints: NDJSON, one checkpoint a
// line, closed when the answer ends (or ctx does).
func (s *apiSource) checkpointStream(ctx context.Context, session string, follow bool) (<-chan events.Checkpoint, error) {
	q := url.Values{"follow": {fmt.Sprint(follow)}}
	if session != "" {
		q.Set("session", session)
	}
	client := s.client
	if follow {
		client = &http.Client{Transport: s.client.Transport} // no timeout: it follows
	}
	u := s.base.String() + "/v1/checkpoints?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		err := fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, bytes.TrimSpace(b))
		if resp.StatusCode == http.StatusNotFound {
			return nil, notFound{err}
		}
		return nil, err
	}
	out := make(chan events.Checkpoint, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		for sc.Scan() {
			cp, err := events.ParseCheckpoint(sc.Bytes())
			if err != nil {
				continue
			}
			select {
			case out <- cp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// readWitness reads a witness file: one checkpoint a line (blank lines
// skipped). A line that is not a checkpoint is an error naming it.
func readWitness(path string) ([]replay.Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--witness: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var out []replay.Checkpoint
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		cp, err := events.ParseCheckpoint(line)
		if err != nil {
			return nil, fmt.Errorf("--witness %s line %d: %w", path, n, err)
		}
		out = append(out, replay.Checkpoint{Checkpoint: cp, From: fmt.Sprintf("the witness %s (line %d)", path, n)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--witness %s: %w", path, err)
	}
	return out, nil
}

// witness follows the checkpoints src delivers and appends every one newer
// than what the file holds for its session, each line synced to disk, until
// ctx ends (or, from a stopped node's store, until the latest are written).
// With --pubkey a checkpoint that does not verify is not written, and said
// so on Stderr.
func (m *Main) witness(ctx context.Context, src interface {
	follow(ctx context.Context, session string) (<-chan events.Checkpoint, error)
}) error {
	keys, err := m.keys()
	if err != nil {
		return err
	}
	held, err := readWitness(m.Witness)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	latest := map[string]uint64{}
	for _, cp := range held {
		k := cp.Tenant + "/" + cp.Session
		latest[k] = max(latest[k], cp.Seq)
	}
	f, err := os.OpenFile(m.Witness, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("--witness: %w", err)
	}
	defer f.Close()
	ch, err := src.follow(ctx, m.Session)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stderr, "witnessing checkpoints into %s (%d held); stop with Ctrl-C\n", m.Witness, len(held))
	written := 0
	for cp := range ch {
		k := cp.Tenant + "/" + cp.Session
		if cp.Seq <= latest[k] {
			continue
		}
		if len(keys) > 0 && !verifiesWithOne(cp, keys) {
			fmt.Fprintf(m.Stderr, "witness: the checkpoint of %s at seq %d does not verify with the given key: not written\n", k, cp.Seq)
			continue
		}
		b, err := jsonLine(cp)
		if err != nil {
			return err
		}
		if _, err := f.Write(b); err != nil {
			return fmt.Errorf("--witness: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("--witness: %w", err)
		}
		latest[k] = cp.Seq
		written++
	}
	fmt.Fprintf(m.Stderr, "witness: %d checkpoints written to %s\n", written, m.Witness)
	return nil
}

// jsonLine is cp as a witness line.
func jsonLine(cp events.Checkpoint) ([]byte, error) {
	b, err := json.Marshal(cp)
	return append(b, '\n'), err
}

func verifiesWithOne(cp events.Checkpoint, keys []ed25519.PublicKey) bool {
	for _, k := range keys {
		if cp.Verify(k) == nil {
			return true
		}
	}
	return false
}

// checkpointLine says what the checkpoints cover, or "" when none were
// looked for.
func checkpointLine(r replay.Report, looked bool) string {
	switch {
	case r.Checkpoints == 0 && !looked:
		return ""
	case r.Checkpoints == 0:
		return "checkpoints: none found for this session (a node keeps one per active session; callsheet-replay --witness FILE keeps them away from NATS): a cut of the log's last events would not show"
	case r.Cut > 0:
		return fmt.Sprintf("checkpoints: %d; the log ends at seq %d, before the head at seq %d a checkpoint holds: it was cut", r.Checkpoints, r.HeadSeq, r.Cut)
	case r.Checkpointed == 0:
		return fmt.Sprintf("checkpoints: %d, none holds this log's events as they are", r.Checkpoints)
	case r.Checkpointed == r.HeadSeq:
		return fmt.Sprintf("checkpoints: %d; the latest, in %s, signed at %s, holds the head (seq %d): a cut of the log would show, but for events written after it and cut before the next checkpoint (its node signs within %s and every %d events)",
			r.Checkpoints, r.CheckpointFrom, r.CheckpointedAt.UTC().Format(time.RFC3339Nano), r.Checkpointed, r.CheckpointInterval, r.CheckpointEvery)
	}
	return fmt.Sprintf("checkpoints: %d; the latest, in %s, signed at %s, holds seq %d: the %d events after it are covered by none (the undetectable window)",
		r.Checkpoints, r.CheckpointFrom, r.CheckpointedAt.UTC().Format(time.RFC3339Nano), r.Checkpointed, r.HeadSeq-r.Checkpointed)
}
