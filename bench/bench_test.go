package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/sandbox"
)

// TestSuiteRuns runs every benchmark once with tiny sizes and checks the
// JSON lines: it proves the command works, and asserts nothing about speed.
// TestMain lets this binary serve as the sandbox helper (latency/shell).
func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(m.Run())
}

func TestSuiteRuns(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	cfg := QuickConfig()
	cfg.Calls, cfg.DirectCalls = 20, 1000
	cfg.Duration = 100 * time.Millisecond
	cfg.Concurrency = []int{1, 4}
	cfg.ScheduleTurns = 1
	cfg.FoldEvents = 2000
	cfg.LogSizes = []int{1000, 3000}
	cfg.IdleSessions, cfg.InflightCalls = 50, 4
	cfg.JSON = true
	cfg.NoFleet = true
	var out bytes.Buffer
	m := &Main{Config: cfg, Stdout: &out, Stderr: io.Discard}
	// A guard against a hang, not a speed bound: on a loaded 2-core
	// machine the tiny suite has taken over 3 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	names := map[string]Row{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if r.Name == "" || r.Unit == "" || (r.Better != Lower && r.Better != Higher) || r.Conditions == "" {
			t.Errorf("row %+v: want name, unit, better and conditions", r)
		}
		if (r.Floor == nil) != (r.Ratio == nil) {
			t.Errorf("row %s: floor and ratio must both be set or both be null", r.Name)
		}
		names[r.Name] = r
	}
	for _, want := range []string{
		"probe/writes-per-call", "latency/direct/p50",
		"latency/fsync/p50", "latency/interval/p50-vs-writes", "write/interval/p50",
		"throughput/fsync/s1", "throughput/interval/s4-vs-writes",
		"schedule/fsync/overhead", "schedule/interval/overhead", "stream/fsync/first-result", "stream/fsync/turn",
		"mcp/fsync/p50", "mcp/interval/overhead-p50",
		"worker/fsync/p50", "worker/interval/overhead-p50",
		"replay/fold/rate", "replay/fold/per-call", "replay/log/session100-in-1k", "replay/log/session100-in-3k", "replay/log/session100-in-3k-cold",
		"memory/session/idle", "memory/call/inflight", "memory/call/completed-turn",
		"latency/shell/p50", "cpu/shell/per-call", "checkpoint/fsync/p50", "checkpoint/fsync/cpu-per-call",
		"fairness/cpu/read/p50", "fairness/cpu/read/p50-without-cgroups",
		"tracing/interval/p50", "tracing/interval/cpu-per-call",
		"fairness/slots/turn", "fairness/slots/background-wait",
	} {
		if _, ok := names[want]; !ok {
			t.Errorf("row %s missing; got %d rows", want, len(names))
		}
	}
	if r := names["latency/interval/p50"]; r.Floor == nil || *r.Floor <= 0 {
		t.Errorf("latency/interval/p50 floor = %v, want a measured floor", r.Floor)
	}
	if r := names["probe/writes-per-call"]; r.Value < 1 {
		t.Errorf("probe/writes-per-call = %v, want at least 1", r.Value)
	}
}

// TestTable checks the table output and -only on a cheap benchmark.
func TestTable(t *testing.T) {
	var out bytes.Buffer
	m := NewMain(&out, io.Discard)
	if err := m.ParseFlags([]string{"-quick", "-only", "^latency/direct$"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"name", "better", "floor", "ratio", "latency/direct/p50", "µs", "↓ lower"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "latency/fsync") {
		t.Errorf("-only ran latency/fsync:\n%s", got)
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr bool
		check   func(Config) bool
	}{
		{name: "defaults", check: func(c Config) bool { return c.Runs == 5 && c.LogSizes[len(c.LogSizes)-1] == 1_000_000 && !c.Peers }},
		{name: "quick", args: []string{"-quick"}, check: func(c Config) bool { return c.Runs == 1 && c.LogSizes[len(c.LogSizes)-1] == 50_000 }},
		{name: "runs", args: []string{"-quick", "-runs", "3", "-json"}, check: func(c Config) bool { return c.Runs == 3 && c.JSON }},
		{name: "only", args: []string{"-only", "replay"}, check: func(c Config) bool { return c.Only.MatchString("replay/log") && !c.Only.MatchString("memory/call") }},
		{name: "peers", args: []string{"-peers", "-only", "peer"}, check: func(c Config) bool { return c.Peers && c.Only.MatchString("peer/temporal") }},
		{name: "sessions", args: []string{"-sessions", "16, 1024"}, check: func(c Config) bool { return slices.Equal(c.Concurrency, []int{16, 1024}) }},
		{name: "bad sessions", args: []string{"-sessions", "16,,0"}, wantErr: true},
		{name: "zero sessions", args: []string{"-sessions", "0"}, wantErr: true},
		{name: "bad regexp", args: []string{"-only", "("}, wantErr: true},
		{name: "negative runs", args: []string{"-runs", "-1"}, wantErr: true},
		{name: "stray argument", args: []string{"latency"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMain(io.Discard, io.Discard)
			err := m.ParseFlags(tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && !tc.check(m.Config) {
				t.Errorf("config %+v does not match", m.Config)
			}
			if errors.Is(err, flag.ErrHelp) {
				t.Errorf("err = %v, not a help request", err)
			}
		})
	}
}

func TestAggregate(t *testing.T) {
	rows := aggregate([]sample{
		{name: "a", value: 3, unit: "µs", better: Lower, floor: 1},
		{name: "b", value: 10, unit: "B", better: Lower},
		{name: "a", value: 1, unit: "µs", better: Lower, floor: 2},
		{name: "a", value: 2, unit: "µs", better: Lower, floor: 4},
	})
	if len(rows) != 2 || rows[0].Name != "a" || rows[1].Name != "b" {
		t.Fatalf("rows = %+v, want a then b", rows)
	}
	if rows[0].Value != 2 || *rows[0].Floor != 2 || *rows[0].Ratio != 1 {
		t.Errorf("a = %v floor %v ratio %v, want 2, 2, 1", rows[0].Value, *rows[0].Floor, *rows[0].Ratio)
	}
	if rows[1].Floor != nil || rows[1].Ratio != nil {
		t.Errorf("b has floor %v ratio %v, want none", rows[1].Floor, rows[1].Ratio)
	}
}

// TestSuiteSkipsAndGoesOn: a benchmark that cannot run here is skipped
// with its reason and one that fails is reported, and neither stops the
// rows of the others, which are handed out as each benchmark finishes.
func TestSuiteSkipsAndGoesOn(t *testing.T) {
	row := func(name string) func(context.Context, *suite) ([]sample, error) {
		return func(context.Context, *suite) ([]sample, error) {
			return []sample{{name: name, value: 1, unit: "µs", better: Lower, conditions: "test"}}, nil
		}
	}
	var emitted [][]string
	s := &suite{cfg: Config{Runs: 2}}
	outcomes, err := s.runEach(context.Background(), []benchmark{
		{name: "a", fn: row("a/p50")},
		{name: "needs-x", fn: func(context.Context, *suite) ([]sample, error) {
			return nil, skip("x is not installed: run scripts/ensure-x")
		}},
		{name: "broken", fn: func(context.Context, *suite) ([]sample, error) { return nil, errors.New("boom") }},
		{name: "b", fn: row("b/p50")},
	}, func(rows []Row) error {
		var names []string
		for _, r := range rows {
			names = append(names, r.Name)
		}
		emitted = append(emitted, names)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(emitted) != 2 || emitted[0][0] != "a/p50" || emitted[1][0] != "b/p50" {
		t.Fatalf("emitted %v, want a's rows then b's, each as it finished", emitted)
	}
	if len(outcomes) != 2 || !outcomes[0].Skipped() || outcomes[0].Reason() != "x is not installed: run scripts/ensure-x" || outcomes[1].Skipped() || outcomes[1].Reason() != "boom" {
		t.Fatalf("outcomes %+v", outcomes)
	}
}

// TestMCPSkippedWithoutItsServers: without the pinned MCP servers the run
// finishes, says the mcp rows were skipped and why, and prints the other
// rows; it used to stop at mcp/fsync with an error.
func TestMCPSkippedWithoutItsServers(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	empty := t.TempDir()
	t.Setenv("CALLSHEET_MCP_DEPS", empty)
	t.Chdir(empty) // .tools/mcp is looked for in . and ..: neither has it
	cfg := QuickConfig()
	cfg.Calls, cfg.Runs = 20, 1
	cfg.Only = regexp.MustCompile(`^(mcp/interval|latency/interval)$`)
	var out bytes.Buffer
	m := &Main{Config: cfg, Stdout: &out, Stderr: io.Discard}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"latency/interval/p50 ", "skipped mcp/interval: the mcp benchmark needs the pinned MCP servers: run scripts/ensure-mcp-deps"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestTracingSkippedWithoutTheCollector: without the OpenTelemetry
// Collector the tracing rows are skipped, saying what to run, and the others
// are printed.
func TestTracingSkippedWithoutTheCollector(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("CALLSHEET_OTELCOL", "")
	empty := t.TempDir()
	t.Chdir(empty) // .tools/bin is looked for in . and ..: neither has it
	cfg := QuickConfig()
	cfg.Calls, cfg.Runs = 20, 1
	cfg.Only = regexp.MustCompile(`^(tracing/interval|latency/interval)$`)
	var out bytes.Buffer
	m := &Main{Config: cfg, Stdout: &out, Stderr: io.Discard}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"latency/interval/p50 ", "skipped tracing/interval: the tracing benchmark needs the OpenTelemetry Collector as its receiver: run scripts/ensure-otelcol"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
