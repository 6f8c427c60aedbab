package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/callsheet/callsheet/sandbox"
)

func main() {
	// First: the shell benchmark runs sandboxed commands, for which the
	// node re-executes this binary as the sandbox helper.
	sandbox.Main()
	m := NewMain(os.Stdout, os.Stderr)
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// Config sets what the suite runs and how big it is. DefaultConfig is the
// full suite; QuickConfig a smoke run of the same benchmarks.
type Config struct {
	// Runs is how many times each benchmark runs; rows are medians.
	Runs int
	// Only selects benchmarks whose name matches; nil runs all.
	Only *regexp.Regexp
	// JSON prints one JSON object per row instead of a table.
	JSON bool
	// CPUProfile, if set, receives a CPU profile of the whole run.
	CPUProfile string
	// MemProfile, if set, receives the allocations of the whole run (a heap
	// profile written at its end: go tool pprof -sample_index=alloc_space).
	MemProfile string
	// Peers adds the peer benchmark (bench/peer.go): the same no-op call
	// through Temporal, built from its own module, bench/peers.
	Peers bool
	// NoFleet leaves out the fleet rows (bench/fleet.go), which start a
	// cluster of three and build cmd/callsheet-node: TestSuiteRuns does, to stay
	// within its time, as the fleet crash suite and api's fleet tests
	// exercise the same machinery.
	NoFleet bool

	// Calls is how many one-call turns the latency benchmarks time.
	Calls int
	// DirectCalls is how many in-process calls latency/direct times.
	DirectCalls int
	// Duration is how long each throughput measurement lasts (after a
	// warm-up of a fifth of it).
	Duration time.Duration
	// Concurrency lists the session counts of the throughput benchmarks.
	Concurrency []int
	// ScheduleTurns is how many 8-call turns schedule times per run.
	ScheduleTurns int
	// FoldEvents is how many events replay/fold folds per run.
	FoldEvents int
	// LogSizes are the numbers of other sessions' events replay/log puts in
	// the log before reading one session; the last is compared to the first.
	LogSizes []int
	// IdleSessions is how many sessions memory/session opens.
	IdleSessions int
	// InflightCalls is how many blocked calls memory/call holds at once (at
	// most config.DefaultParallelSafeWorkers run at once).
	InflightCalls int
	// SessionTurns is how many one-call turns memory/turn measures in one
	// session (after a tenth as many not counted).
	SessionTurns int
	// SearchSessions is how many sessions search files before it queries
	// (its floor: a tenth as many).
	SearchSessions int
}

// DefaultConfig is the full suite.
func DefaultConfig() Config {
	return Config{
		Runs:          5,
		Calls:         1000,
		DirectCalls:   100_000,
		Duration:      time.Second,
		Concurrency:   []int{1, 16, 256},
		ScheduleTurns: 5,
		FoldEvents:    200_000,
		LogSizes:      []int{10_000, 1_000_000},
		IdleSessions:  10_000,
		InflightCalls: 256,
		SessionTurns:  20_000,

		SearchSessions: 20_000,
	}
}

// QuickConfig runs every benchmark once with small sizes: it shows the suite
// works, not where we stand.
func QuickConfig() Config {
	return Config{
		Runs:          1,
		Calls:         100,
		DirectCalls:   10_000,
		Duration:      200 * time.Millisecond,
		Concurrency:   []int{1, 16, 256},
		ScheduleTurns: 2,
		FoldEvents:    20_000,
		LogSizes:      []int{10_000, 50_000},
		IdleSessions:  500,
		InflightCalls: 32,
		SessionTurns:  1_000,

		SearchSessions: 1_000,
	}
}

// Main is the bench command.
type Main struct {
	Config Config
	Stdout io.Writer
	Stderr io.Writer
}

// NewMain returns a Main with the default config writing to stdout and
// progress to stderr.
func NewMain(stdout, stderr io.Writer) *Main {
	return &Main{Config: DefaultConfig(), Stdout: stdout, Stderr: stderr}
}

// ParseFlags reads the command line into m.Config.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	quick := fs.Bool("quick", false, "a fast smoke run: 1 run, small sizes (the log of replay/log holds 50 k events, not 1 M)")
	runs := fs.Int("runs", 0, "runs per benchmark; rows are medians (default 5, 1 with -quick)")
	only := fs.String("only", "", "run only the benchmarks whose name matches this regular expression (e.g. 'latency|throughput/interval')")
	js := fs.Bool("json", false, "print one JSON object per line: name, value, unit, floor, ratio, better, conditions")
	cpu := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	mem := fs.String("memprofile", "", "write a heap profile, with every allocation of the run, to this file at its end")
	dur := fs.Duration("duration", 0, "how long each throughput measurement lasts (default 1s, 200ms with -quick)")
	calls := fs.Int("calls", 0, "one-call turns timed by each latency run (default 1000, 100 with -quick)")
	sessions := fs.String("sessions", "", "comma-separated session counts of the throughput benchmarks (default 1,16,256), e.g. 1024 for a node serving more sessions than that")
	peers := fs.Bool("peers", false, "also run peer/temporal: the same no-op call through Temporal in-process, built from bench/peers (its own module; the first build takes minutes)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: bench takes flags only (see -h)", fs.Args())
	}
	cfg := DefaultConfig()
	if *quick {
		cfg = QuickConfig()
	}
	if *runs < 0 || *calls < 0 || *dur < 0 {
		return fmt.Errorf("-runs, -calls and -duration must not be negative")
	}
	if *runs > 0 {
		cfg.Runs = *runs
	}
	if *calls > 0 {
		cfg.Calls = *calls
	}
	if *dur > 0 {
		cfg.Duration = *dur
	}
	if *sessions != "" {
		levels, err := parseSessions(*sessions)
		if err != nil {
			return err
		}
		cfg.Concurrency = levels
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return fmt.Errorf("-only %q: %w", *only, err)
		}
		cfg.Only = re
	}
	cfg.JSON, cfg.CPUProfile, cfg.MemProfile, cfg.Peers = *js, *cpu, *mem, *peers
	m.Config = cfg
	return nil
}

// parseSessions reads -sessions: positive session counts, comma-separated.
func parseSessions(list string) ([]int, error) {
	var levels []int
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-sessions %q: %q is not a positive number of sessions (use e.g. -sessions 1,16,256)", list, f)
		}
		levels = append(levels, n)
	}
	return levels, nil
}

// Run runs the selected benchmarks and prints their rows.
func (m *Main) Run(ctx context.Context) error {
	cfg := m.Config
	if cfg.Runs < 1 {
		return fmt.Errorf("runs %d: use at least 1", cfg.Runs)
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.MemProfile != "" {
		f, err := os.Create(cfg.MemProfile)
		if err != nil {
			return fmt.Errorf("memory profile: %w", err)
		}
		defer func() {
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintln(m.Stderr, "bench: memory profile:", err)
			}
			f.Close()
		}()
	}
	s := &suite{cfg: cfg, progress: m.Stderr}
	load0 := loadavg()
	emit := func(rows []Row) error { return writeJSON(m.Stdout, rows) }
	if !cfg.JSON {
		fmt.Fprintf(m.Stdout, "callsheet bench: %d CPUs (GOMAXPROCS %d), %s, nats-server %s embedded, in-process connection, R1 file store; median of %d run(s); load average %s at start\n\n",
			runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), natsserver.VERSION, cfg.Runs, load0)
		if err := writeHeader(m.Stdout); err != nil {
			return err
		}
		emit = func(rows []Row) error { return writeTable(m.Stdout, rows) }
	}
	start := time.Now()
	outcomes, err := s.run(ctx, emit)
	if err != nil {
		return err
	}
	// What did not run, and why: on stderr with -json (stdout holds rows
	// only), else under the table.
	report := m.Stdout
	if cfg.JSON {
		report = m.Stderr
	}
	var failed []string
	if !cfg.JSON {
		fmt.Fprintf(report, "\nload average %s at end; %s in all\n", loadavg(), time.Since(start).Round(time.Second))
	}
	for _, o := range outcomes {
		if o.Skipped() {
			fmt.Fprintf(report, "skipped %s: %s\n", o.Name, o.Reason())
		} else {
			fmt.Fprintf(report, "FAILED %s: %s\n", o.Name, o.Reason())
			failed = append(failed, o.Name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d benchmark(s) failed: %s (their rows are missing; the others are above)", len(failed), strings.Join(failed, ", "))
	}
	return nil
}
