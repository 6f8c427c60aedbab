// Package otlptest runs the OpenTelemetry Collector as a test's OTLP/HTTP
// receiver and reads back the spans it received. The Collector is
// scripts/otelcol (its otlpreceiver and fileexporter, built by
// scripts/ensure-otelcol): a separate process, which decodes what a node
// exports with the Collector's own OTLP code and writes it as OTLP JSON,
// one export request a line; Spans reads that file.
package otlptest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/testenv"
)

// Collector is a running Collector process.
type Collector struct {
	// Endpoint is the OTLP/HTTP base URL (OTEL_EXPORTER_OTLP_ENDPOINT).
	Endpoint string
	out      string
	cmd      *exec.Cmd
	stderr   *testenv.Buffer
	done     chan struct{} // closed once the process exited
}

// Start starts a Collector receiving OTLP/HTTP on a free loopback port and
// waits until it accepts requests; it is stopped at the test's end.
func Start(t testing.TB) *Collector {
	t.Helper()
	c, err := Run(testenv.Otelcol(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Run starts the Collector bin receiving OTLP/HTTP on a free loopback port,
// writing what it receives under dir, and waits (up to 30 s) until it
// accepts requests. The caller stops it (Stop).
func Run(bin, dir string) (*Collector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	c := &Collector{Endpoint: "http://" + addr, out: filepath.Join(dir, "spans.jsonl"), stderr: &testenv.Buffer{}, done: make(chan struct{})}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
exporters:
  file:
    path: %s
    flush_interval: 50ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, addr, c.out)
	cfgPath := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	c.cmd = exec.Command(bin, "--config", "file:"+cfgPath)
	c.cmd.Stdout, c.cmd.Stderr = c.stderr, c.stderr
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("the OpenTelemetry Collector %s: %w", bin, err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// An empty export is a valid request: 200 once the receiver serves.
		resp, err := http.Post(c.Endpoint+"/v1/traces", "application/json", strings.NewReader(`{}`))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c, nil
			}
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("the OpenTelemetry Collector exited: %s", c.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, fmt.Errorf("the OpenTelemetry Collector did not serve %s within 30 s: %v\n%s", c.Endpoint, err, c.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the Collector and waits for it to exit.
func (c *Collector) Stop() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// Log returns what the Collector printed.
func (c *Collector) Log() string { return c.stderr.String() }

// File returns the OTLP JSON lines the Collector wrote, as it wrote them.
func (c *Collector) File() string {
	b, _ := os.ReadFile(c.out)
	return string(b)
}

// Span is one span as the Collector received it.
type Span struct {
	Resource     map[string]any
	TraceID      string
	SpanID       string
	ParentSpanID string
	Name         string
	Kind         int
	Start, End   time.Time
	Attrs        map[string]any
	Events       []Event
	StatusCode   int // 0 unset, 1 ok, 2 error
	StatusMsg    string
}

// Event is a span event.
type Event struct {
	Name  string
	Time  time.Time
	Attrs map[string]any
}

// Spans returns every span received so far, in start order.
func (c *Collector) Spans(t testing.TB) []Span {
	t.Helper()
	b, err := os.ReadFile(c.out)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []Span
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var req exportRequest
		if err := json.Unmarshal(line, &req); err != nil {
			t.Fatalf("the Collector's output is not OTLP JSON: %v: %s", err, line)
		}
		for _, rs := range req.ResourceSpans {
			res := attrs(rs.Resource.Attributes)
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					sp := Span{Resource: res, TraceID: s.TraceID, SpanID: s.SpanID, ParentSpanID: s.ParentSpanID, Name: s.Name, Kind: s.Kind,
						Start: nanos(s.Start), End: nanos(s.End), Attrs: attrs(s.Attributes), StatusCode: s.Status.Code, StatusMsg: s.Status.Message}
					for _, e := range s.Events {
						sp.Events = append(sp.Events, Event{Name: e.Name, Time: nanos(e.Time), Attrs: attrs(e.Attributes)})
					}
					out = append(out, sp)
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// Await returns the spans once ok says they are all there, failing the test
// after timeout.
func (c *Collector) Await(t testing.TB, timeout time.Duration, ok func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		spans := c.Spans(t)
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Collector did not receive the spans wanted within %s; it has %d:\n%s", timeout, len(spans), Tree(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Tree renders spans as an indented tree by parent, with their attributes
// and events: a trace as the receiver got it, for a test's log.
func Tree(spans []Span) string {
	children := map[string][]Span{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	var roots []Span
	for _, s := range spans {
		if s.ParentSpanID == "" || !ids[s.ParentSpanID] {
			roots = append(roots, s)
		} else {
			children[s.ParentSpanID] = append(children[s.ParentSpanID], s)
		}
	}
	var b strings.Builder
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		pad := strings.Repeat("  ", depth)
		fmt.Fprintf(&b, "%s%s  [trace %s span %s parent %s] %s +%s", pad, s.Name, s.TraceID, s.SpanID, orNone(s.ParentSpanID),
			s.Start.UTC().Format("15:04:05.000000"), s.End.Sub(s.Start).Round(time.Microsecond))
		if s.StatusCode == 2 {
			fmt.Fprintf(&b, " status=ERROR %q", s.StatusMsg)
		}
		b.WriteString("\n")
		for _, k := range sortedKeys(s.Attrs) {
			fmt.Fprintf(&b, "%s    %s=%v\n", pad, k, s.Attrs[k])
		}
		for _, e := range s.Events {
			fmt.Fprintf(&b, "%s    event %s at %s", pad, e.Name, e.Time.UTC().Format("15:04:05.000000"))
			for _, k := range sortedKeys(e.Attrs) {
				fmt.Fprintf(&b, " %s=%v", k, e.Attrs[k])
			}
			b.WriteString("\n")
		}
		for _, c := range children[s.SpanID] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// The OTLP JSON encoding of an ExportTraceServiceRequest (the parts read
// here): ids in hex, times as decimal strings of nanoseconds, 64-bit
// integers as strings.
type exportRequest struct {
	ResourceSpans []struct {
		Resource struct {
			Attributes []keyValue `json:"attributes"`
		} `json:"resource"`
		ScopeSpans []struct {
			Spans []struct {
				TraceID      string     `json:"traceId"`
				SpanID       string     `json:"spanId"`
				ParentSpanID string     `json:"parentSpanId"`
				Name         string     `json:"name"`
				Kind         int        `json:"kind"`
				Start        string     `json:"startTimeUnixNano"`
				End          string     `json:"endTimeUnixNano"`
				Attributes   []keyValue `json:"attributes"`
				Events       []struct {
					Time       string     `json:"timeUnixNano"`
					Name       string     `json:"name"`
					Attributes []keyValue `json:"attributes"`
				} `json:"events"`
				Status struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"status"`
			} `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
}

type keyValue struct {
	Key   string `json:"key"`
	Value struct {
		String *string  `json:"stringValue"`
		Int    *string  `json:"intValue"`
		Double *float64 `json:"doubleValue"`
		Bool   *bool    `json:"boolValue"`
	} `json:"value"`
}

// attrs maps attributes to Go values: string, int64, float64 or bool.
func attrs(kvs []keyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.Value; {
		case v.String != nil:
			m[kv.Key] = *v.String
		case v.Int != nil:
			n, _ := strconv.ParseInt(*v.Int, 10, 64)
			m[kv.Key] = n
		case v.Double != nil:
			m[kv.Key] = *v.Double
		case v.Bool != nil:
			m[kv.Key] = *v.Bool
		}
	}
	return m
}

func nanos(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, n)
}
