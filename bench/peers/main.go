package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	m := NewMain(os.Stdout, os.Stderr)
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "peers:", err)
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// Shapes of the no-op call on Temporal.
const (
	// ShapeActivity is a standalone activity: one durable activity
	// execution, started and awaited by the client.
	ShapeActivity = "activity"
	// ShapeWorkflow is a workflow that runs the activity once.
	ShapeWorkflow = "workflow"
)

// Config sets what the peer measures.
type Config struct {
	// Settings are the names of the settings to measure, in order.
	Settings []string
	// Shapes are the shapes to time one call at a time.
	Shapes []string
	// Calls is how many calls each latency series times on a tuned
	// setting; DefaultCalls on the default one, whose calls take ~50 ms.
	Calls, DefaultCalls int
	// Throughput lists the settings whose standalone-activity throughput
	// is measured, at each of Concurrency, for Duration each.
	Throughput  []string
	Concurrency []int
	Duration    time.Duration
	// JSON prints one JSON object per row instead of a table.
	JSON bool
	// CPUProfile, if set, receives a CPU profile of the whole run.
	CPUProfile string
}

// DefaultConfig measures every setting and shape.
func DefaultConfig() Config {
	return Config{
		Settings:     []string{"default", "tuned-fsync", "tuned-interval"},
		Shapes:       []string{ShapeActivity, ShapeWorkflow},
		Calls:        1000,
		DefaultCalls: 100,
		Throughput:   []string{"tuned-fsync", "tuned-interval"},
		Concurrency:  []int{1, 16},
		Duration:     5 * time.Second,
	}
}

// Row is one measurement, in the shape the bench command reads
// (bench/peer.go): no floor, the bench adds ratios.
type Row struct {
	Name       string  `json:"name"`
	Value      float64 `json:"value"`
	Unit       string  `json:"unit"`
	Better     string  `json:"better"`
	Conditions string  `json:"conditions"`
}

// Main is the peers command.
type Main struct {
	Config Config
	Stdout io.Writer
	Stderr io.Writer
}

// NewMain returns a Main with the default config.
func NewMain(stdout, stderr io.Writer) *Main {
	return &Main{Config: DefaultConfig(), Stdout: stdout, Stderr: stderr}
}

// ParseFlags reads the command line into m.Config.
func (m *Main) ParseFlags(args []string) error {
	d := DefaultConfig()
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	js := fs.Bool("json", false, "print one JSON object per line: name, value, unit, better, conditions")
	sets := fs.String("settings", strings.Join(d.Settings, ","), "settings to measure (default, tuned-fsync, tuned-interval; tuned-memory is not durable)")
	shapes := fs.String("shapes", strings.Join(d.Shapes, ","), "shapes to time: activity (standalone), workflow (a workflow running the activity)")
	calls := fs.Int("calls", d.Calls, "calls timed per latency series on a tuned setting")
	dcalls := fs.Int("default-calls", d.DefaultCalls, "calls timed per latency series on the default setting (~50 ms each)")
	tput := fs.String("throughput", strings.Join(d.Throughput, ","), "settings whose throughput is measured (empty: none)")
	conc := fs.String("concurrency", "1,16", "concurrent callers of the throughput measurements")
	dur := fs.Duration("duration", d.Duration, "each throughput measurement, after a warm-up of a fifth of it")
	cpu := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: peers takes flags only (see -h)", fs.Args())
	}
	cfg := Config{JSON: *js, CPUProfile: *cpu, Calls: *calls, DefaultCalls: *dcalls, Duration: *dur}
	if *calls < 1 || *dcalls < 1 || *dur <= 0 {
		return fmt.Errorf("-calls %d, -default-calls %d, -duration %s: each must be positive", *calls, *dcalls, *dur)
	}
	cfg.Settings, cfg.Throughput = list(*sets), list(*tput)
	for _, name := range append(slices.Clone(cfg.Settings), cfg.Throughput...) {
		if _, err := settingNamed(name); err != nil {
			return fmt.Errorf("-settings/-throughput: %w", err)
		}
	}
	cfg.Shapes = list(*shapes)
	for _, sh := range cfg.Shapes {
		if sh != ShapeActivity && sh != ShapeWorkflow {
			return fmt.Errorf("-shapes: unknown shape %q: use activity, workflow or both", sh)
		}
	}
	for _, c := range list(*conc) {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			return fmt.Errorf("-concurrency %q: want positive integers separated by commas, as 1,16,256", *conc)
		}
		cfg.Concurrency = append(cfg.Concurrency, n)
	}
	m.Config = cfg
	return nil
}

func list(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Run measures every setting the config names, each on a server of its
// own, and prints the rows.
func (m *Main) Run(ctx context.Context) error {
	if m.Config.CPUProfile != "" {
		f, err := os.Create(m.Config.CPUProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var rows []Row
	for _, name := range unique(m.Config.Settings, m.Config.Throughput) {
		s, err := settingNamed(name)
		if err != nil {
			return err
		}
		got, err := m.measure(ctx, s)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, got...)
	}
	if m.Config.JSON {
		enc := json.NewEncoder(m.Stdout)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tvalue\tunit\tbetter\tconditions")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.4g\t%s\t%s\t%s\n", r.Name, r.Value, r.Unit, r.Better, r.Conditions)
	}
	return tw.Flush()
}

func unique(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, s := range l {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// warmCalls run before every timed series and are not timed.
const warmCalls = 20

// measure starts a peer with setting s and takes its rows.
func (m *Main) measure(ctx context.Context, s Setting) ([]Row, error) {
	m.logf("%s: starting the dev server", s.Name)
	start := time.Now()
	p, err := StartPeer(s)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	m.logf("%s: serving after %s", s.Name, time.Since(start).Round(time.Millisecond))
	base := fmt.Sprintf("Temporal server %s in-process (go.temporal.io/server/temporal, as the temporal CLI's dev server: 1 history shard), SDK %s client and worker in the same process over loopback gRPC; %s",
		modVersion("go.temporal.io/server"), modVersion("go.temporal.io/sdk"), s.Persists)
	var rows []Row
	// What the server burns with nothing to do: the tuned poll rates must
	// not turn into a busy loop that the latency rows would then hide.
	idle0 := processCPU()
	time.Sleep(time.Second)
	rows = append(rows, Row{
		Name: fmt.Sprintf("peer/temporal/%s/idle-cpu", s.Name), Value: float64(processCPU()-idle0) / float64(time.Millisecond),
		Unit: "ms/s", Better: "lower", Conditions: base + "; the process's CPU time (server, client and worker) over 1 s with no calls",
	})
	if slices.Contains(m.Config.Settings, s.Name) {
		n := m.Config.Calls
		if s.Name == "default" {
			n = m.Config.DefaultCalls
		}
		for _, shape := range m.Config.Shapes {
			call, what := p.shape(shape)
			m.logf("%s: timing %d %s calls", s.Name, n, shape)
			lat, cpu, err := timeCalls(ctx, call, n)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", shape, err)
			}
			cond := fmt.Sprintf("%s; %s, one at a time, %d calls after %d untimed", base, what, n, warmCalls)
			for _, q := range []float64{50, 99} {
				rows = append(rows, Row{
					Name:  fmt.Sprintf("peer/temporal/%s/%s/p%.0f", s.Name, shape, q),
					Value: us(percentile(lat, q)), Unit: "µs", Better: "lower", Conditions: cond,
				})
			}
			rows = append(rows, Row{
				Name:  fmt.Sprintf("peer/temporal/%s/%s/cpu-per-call", s.Name, shape),
				Value: us(cpu / time.Duration(n)), Unit: "µs", Better: "lower",
				Conditions: cond + "; the process's CPU time (server, client and worker: user + system) over the timed calls, per call",
			})
		}
	}
	if slices.Contains(m.Config.Throughput, s.Name) {
		call, what := p.shape(ShapeActivity)
		for _, c := range m.Config.Concurrency {
			m.logf("%s: throughput with %d callers", s.Name, c)
			rate, err := throughput(ctx, call, c, m.Config.Duration)
			if err != nil {
				return nil, fmt.Errorf("throughput with %d callers: %w", c, err)
			}
			rows = append(rows, Row{
				Name:  fmt.Sprintf("peer/temporal/%s/%s/c%d", s.Name, ShapeActivity, c),
				Value: rate, Unit: "calls/s", Better: "higher",
				Conditions: fmt.Sprintf("%s; %d callers each running %s in a loop, %s", base, c, what, m.Config.Duration),
			})
		}
	}
	return rows, nil
}

// shape returns the call of a shape and what it does, for conditions.
func (p *Peer) shape(name string) (func(context.Context) error, string) {
	if name == ShapeWorkflow {
		return p.Workflow, "a workflow running the no-op activity once (ExecuteWorkflow + Get)"
	}
	return p.Activity, "a standalone no-op activity (ExecuteActivity + handle.Get)"
}

// timeCalls times n calls, one at a time, after warmCalls untimed ones, and
// returns the latencies sorted and the process's CPU time over the n.
func timeCalls(ctx context.Context, call func(context.Context) error, n int) ([]time.Duration, time.Duration, error) {
	for range warmCalls {
		if err := call(ctx); err != nil {
			return nil, 0, err
		}
	}
	lat := make([]time.Duration, n)
	cpu0 := processCPU()
	for i := range lat {
		t0 := time.Now()
		if err := call(ctx); err != nil {
			return nil, 0, err
		}
		lat[i] = time.Since(t0)
	}
	cpu := processCPU() - cpu0
	slices.Sort(lat)
	return lat, cpu, nil
}

// processCPU is the CPU time (user + system) the whole process has used:
// on a shared machine it shows what a call costs where wall time also
// counts waiting for a core.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// throughput runs conc callers in a loop and counts the calls completed per
// second over dur, after a warm-up of a fifth of it; as the bench's
// measureThroughput does.
func throughput(ctx context.Context, call func(context.Context) error, conc int, dur time.Duration) (float64, error) {
	var done atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for w := range conc {
		wg.Go(func() {
			for cctx.Err() == nil {
				if err := call(cctx); err != nil {
					if cctx.Err() == nil {
						once.Do(func() { firstErr = fmt.Errorf("caller %d: %w", w, err) })
						cancel()
					}
					return
				}
				done.Add(1)
			}
		})
	}
	sleep := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-cctx.Done():
		}
	}
	sleep(dur / 5) // the peer's queues take a while to fill
	c0, t0 := done.Load(), time.Now()
	sleep(dur)
	c1, t1 := done.Load(), time.Now()
	cancel()
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(c1-c0) / t1.Sub(t0).Seconds(), nil
}

// percentile returns the p-th percentile (0..100) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// modVersion is the version of module path this binary was built with.
func modVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "(unknown version)"
}

func (m *Main) logf(format string, args ...any) {
	if m.Stderr != nil {
		fmt.Fprintf(m.Stderr, "peers: "+format+"\n", args...)
	}
}
