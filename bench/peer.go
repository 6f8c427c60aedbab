package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/callsheet/callsheet/config"
)

// The peer benchmark (-peers) runs the bench's no-op call through Temporal,
// a workflow engine, in the same run as callsheet's, so that "faster than a
// workflow engine" is a ratio measured side by side (docs/performance.md,
// "The peer"). Temporal's server is a large build with
// dependencies of its own, so the peer lives in its own Go module,
// bench/peers: the product's go.mod does not grow, `go test ./...` and
// `go vet ./...` of this module never build it, and the bench builds it
// (`go build`, through the module proxy) only when -peers asks for it.

// peerModule is the module path of bench/peers, checked in its go.mod so
// that the bench never builds some other directory called peers.
const peerModule = "github.com/callsheet/callsheet/bench/peers"

// peerTuned names the peer's tuned setting per callsheet durability: the
// same durability promise on each side (an fsync before the
// acknowledgement, or a periodic one).
var peerTuned = map[string]string{
	config.DurabilityFsync:    "tuned-fsync",
	config.DurabilityInterval: "tuned-interval",
}

// ourPersists says, for a row's conditions, what each durability makes
// durable before a call returns (docs/spec.md §4).
var ourPersists = map[string]string{
	config.DurabilityFsync:    "JetStream SyncAlways: each of the call's 2 messages fsynced before it is acknowledged",
	config.DurabilityInterval: "JetStream's periodic sync (every 2 min by default): no fsync per message",
}

// peerConcurrency and peerDuration shape the throughput comparison. The
// peer completes a few dozen calls a second on this machine (its CPU per
// call is ~100× ours, docs/performance.md "The peer"), so with 256 callers
// its first calls finish only after seconds and a 1 s window counts
// nothing; both sides are measured at 1 and 16 callers, and the peer over
// 5 s after a 1 s warm-up.
var peerConcurrency = []int{1, 16}

const peerDuration = 5 * time.Second

func (s *suite) peerBenchmarks() []benchmark {
	if !s.cfg.Peers {
		return nil
	}
	return []benchmark{{name: "peer/temporal", once: true, fn: benchPeers}}
}

// peerRow is one line of the peer command's -json output.
type peerRow struct {
	Name       string  `json:"name"`
	Value      float64 `json:"value"`
	Unit       string  `json:"unit"`
	Better     Better  `json:"better"`
	Conditions string  `json:"conditions"`
}

// ours is callsheet's side of the comparison, measured in the same run:
// one-call turn latencies (sorted) and throughput per session count, by
// durability.
type ours struct {
	lat  map[string][]time.Duration
	rate map[string][]float64 // indexed like peerConcurrency
}

// benchPeers builds the peer once, then runs, Runs times, callsheet's
// one-call turn and the peer's no-op activity one after the other, and
// returns both sides' rows and their ratios.
func benchPeers(ctx context.Context, s *suite) ([]sample, error) {
	dir, err := findPeerModule()
	if err != nil {
		return nil, err
	}
	binDir, err := os.MkdirTemp("", "csbench-peers-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(binDir)
	bin := filepath.Join(binDir, "peers")
	s.logf("peer/temporal: building %s (the first build compiles Temporal's server: minutes)", dir)
	start := time.Now()
	if err := goBuild(ctx, dir, bin); err != nil {
		return nil, err
	}
	s.logf("peer/temporal: built in %s", time.Since(start).Round(time.Second))

	var out []sample
	for i := range s.cfg.Runs {
		s.logf("peer/temporal: run %d of %d", i+1, s.cfg.Runs)
		o, err := measureOurs(ctx, s)
		if err != nil {
			return nil, err
		}
		rows, err := runPeer(ctx, s, bin)
		if err != nil {
			return nil, err
		}
		got, err := peerSamples(o, rows, peerConcurrency)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// findPeerModule finds bench/peers from the repository root (go run
// ./bench) or from bench/ (go test ./bench).
func findPeerModule() (string, error) {
	for _, dir := range []string{filepath.Join("bench", "peers"), "peers"} {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			continue
		}
		if bytes.HasPrefix(b, []byte("module "+peerModule+"\n")) {
			return filepath.Abs(dir)
		}
	}
	wd, _ := os.Getwd()
	return "", fmt.Errorf("-peers: no bench/peers module (%s) under %s: run the bench from the repository root, as `go run ./bench -peers`", peerModule, wd)
}

// goBuild builds the peer module in dir into bin with the go command on
// PATH, outside any go.work.
func goBuild(ctx context.Context, dir, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("-peers: go build in %s: %w\n%s\n(the peer module's dependencies come from the Go module proxy: check GOPROXY and the network, or run `cd bench/peers && go build .` to see the build alone)", dir, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// measureOurs times callsheet's one-call turn and its throughput with each
// of peerConcurrency sessions, for both durabilities, as latency/* and
// throughput/* do.
func measureOurs(ctx context.Context, s *suite) (ours, error) {
	o := ours{lat: map[string][]time.Duration{}, rate: map[string][]float64{}}
	for _, d := range []string{config.DurabilityFsync, config.DurabilityInterval} {
		err := labelled(ctx, "node", func(ctx context.Context) error {
			r, err := startNode(ctx, d)
			if err != nil {
				return err
			}
			defer r.close()
			if o.lat[d], err = timeCalls(ctx, r, s.cfg.Calls); err != nil {
				return err
			}
			per := &sessionsPerLevel{r: r}
			for _, c := range peerConcurrency {
				rate, err := measureThroughput(ctx, per, c, s.cfg.Duration)
				if err != nil {
					return fmt.Errorf("%d sessions: %w", c, err)
				}
				o.rate[d] = append(o.rate[d], rate)
			}
			return nil
		})
		if err != nil {
			return ours{}, fmt.Errorf("node (%s): %w", d, err)
		}
	}
	return o, nil
}

// runPeer runs the built peer once and reads its rows. Its progress goes to
// ours.
func runPeer(ctx context.Context, s *suite, bin string) ([]peerRow, error) {
	conc := make([]string, len(peerConcurrency))
	for i, c := range peerConcurrency {
		conc[i] = strconv.Itoa(c)
	}
	// The default setting's calls take ~50 ms each: a tenth as many (at
	// least 20) keeps its series to seconds.
	cmd := exec.CommandContext(ctx, bin, "-json",
		"-calls", strconv.Itoa(s.cfg.Calls),
		"-default-calls", strconv.Itoa(max(s.cfg.Calls/10, 20)),
		"-duration", max(peerDuration, s.cfg.Duration).String(),
		"-concurrency", strings.Join(conc, ","))
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = s.progress
	if s.progress == nil {
		cmd.Stderr = io.Discard
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("peer %s: %w", bin, err)
	}
	return parsePeerRows(&stdout)
}

// parsePeerRows reads the peer's JSON lines.
func parsePeerRows(r io.Reader) ([]peerRow, error) {
	var rows []peerRow
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		var row peerRow
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			return nil, fmt.Errorf("peer output line %d %q: %w", n, sc.Text(), err)
		}
		if row.Name == "" || row.Unit == "" || (row.Better != Lower && row.Better != Higher) {
			return nil, fmt.Errorf("peer output line %d %q: want name, unit and better (lower or higher)", n, sc.Text())
		}
		rows = append(rows, row)
	}
	return rows, sc.Err()
}

// peerSamples returns the peer's rows as samples, and beside them the
// ratios of callsheet to the peer: value = callsheet, floor = Temporal, so
// a latency ratio under 1 (or a throughput ratio over 1) means callsheet is
// faster. Every ratio pairs a durability with the peer's setting that
// makes the same promise (peerTuned); the default setting is compared too,
// since it is what `temporal server start-dev` runs.
func peerSamples(o ours, rows []peerRow, conc []int) ([]sample, error) {
	by := map[string]peerRow{}
	var out []sample
	for _, r := range rows {
		by[r.Name] = r
		out = append(out, sample{name: r.Name, value: r.Value, unit: r.Unit, better: r.Better, conditions: r.Conditions})
	}
	peer := func(name string) (peerRow, error) {
		r, ok := by[name]
		if !ok {
			return peerRow{}, fmt.Errorf("peer output has no row %s (%d rows): is bench/peers older than the bench?", name, len(rows))
		}
		return r, nil
	}
	for _, d := range []string{config.DurabilityFsync, config.DurabilityInterval} {
		lat := o.lat[d]
		ourCond := fmt.Sprintf("callsheet %s (%s), 1 session, one 1-call no-op turn at a time, SubmitTurn wait=true, %d calls", d, ourPersists[d], len(lat))
		for _, c := range []struct {
			suffix, peer string
			q            float64
		}{
			{"p50", "peer/temporal/" + peerTuned[d] + "/activity/p50", 50},
			{"p99", "peer/temporal/" + peerTuned[d] + "/activity/p99", 99},
			{"p50-vs-workflow", "peer/temporal/" + peerTuned[d] + "/workflow/p50", 50},
			{"p50-vs-default", "peer/temporal/default/activity/p50", 50},
		} {
			r, err := peer(c.peer)
			if err != nil {
				return nil, err
			}
			out = append(out, sample{
				name: "peer/vs-temporal/" + d + "/" + c.suffix, value: us(percentile(lat, c.q)), unit: "µs", better: Lower, floor: r.Value,
				conditions: ourCond + "; floor: " + c.peer + " (" + r.Conditions + ")",
			})
		}
		for i, n := range conc {
			name := fmt.Sprintf("peer/temporal/%s/activity/c%d", peerTuned[d], n)
			r, err := peer(name)
			if err != nil {
				return nil, err
			}
			if i >= len(o.rate[d]) {
				return nil, errors.New("peer: fewer throughput measurements of ours than session counts")
			}
			out = append(out, sample{
				name: fmt.Sprintf("peer/vs-temporal/%s/s%d", d, n), value: o.rate[d][i], unit: "calls/s", better: Higher, floor: r.Value,
				conditions: fmt.Sprintf("callsheet %s (%s), %d sessions each submitting one-call no-op turns in a loop; floor: %s (%s)", d, ourPersists[d], n, name, r.Conditions),
			})
		}
	}
	return out, nil
}
