package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// peerOutput is what bench/peers -json prints, with made-up values.
func peerOutput(conc []int) string {
	var b strings.Builder
	line := func(name string, v float64, unit, better string) {
		fmt.Fprintf(&b, `{"name":%q,"value":%g,"unit":%q,"better":%q,"conditions":"temporal %s"}`+"\n", name, v, unit, better, name)
	}
	for _, set := range []string{"default", "tuned-fsync", "tuned-interval"} {
		for _, shape := range []string{"activity", "workflow"} {
			line("peer/temporal/"+set+"/"+shape+"/p50", 5000, "µs", "lower")
			line("peer/temporal/"+set+"/"+shape+"/p99", 10000, "µs", "lower")
		}
	}
	for _, set := range []string{"tuned-fsync", "tuned-interval"} {
		for _, c := range conc {
			line(fmt.Sprintf("peer/temporal/%s/activity/c%d", set, c), 200, "calls/s", "higher")
		}
	}
	return b.String()
}

// TestPeerSamples checks that the peer's rows come through and that each
// ratio divides callsheet's figure by the peer's matching one.
func TestPeerSamples(t *testing.T) {
	conc := []int{1, 16}
	rows, err := parsePeerRows(strings.NewReader(peerOutput(conc)))
	if err != nil {
		t.Fatal(err)
	}
	lat := make([]time.Duration, 100)
	for i := range lat {
		lat[i] = time.Duration(i+1) * 10 * time.Microsecond // p50 500 µs, p99 990 µs
	}
	o := ours{
		lat:  map[string][]time.Duration{"fsync": lat, "interval": lat},
		rate: map[string][]float64{"fsync": {1000, 2000}, "interval": {3000, 4000}},
	}
	samples, err := peerSamples(o, rows, conc)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Row{}
	for _, r := range aggregate(samples) {
		got[r.Name] = r
	}
	for name, want := range map[string]struct{ value, floor, ratio float64 }{
		"peer/vs-temporal/fsync/p50":                {500, 5000, 0.1},
		"peer/vs-temporal/interval/p99":             {990, 10000, 0.099},
		"peer/vs-temporal/interval/p50-vs-workflow": {500, 5000, 0.1},
		"peer/vs-temporal/fsync/p50-vs-default":     {500, 5000, 0.1},
		"peer/vs-temporal/fsync/s1":                 {1000, 200, 5},
		"peer/vs-temporal/interval/s16":             {4000, 200, 20},
	} {
		r, ok := got[name]
		if !ok {
			t.Errorf("row %s missing", name)
			continue
		}
		if r.Value != want.value || r.Floor == nil || *r.Floor != want.floor || fmt.Sprintf("%.3f", *r.Ratio) != fmt.Sprintf("%.3f", want.ratio) {
			t.Errorf("%s = %v floor %v ratio %v, want %v floor %v ratio %v", name, r.Value, r.Floor, r.Ratio, want.value, want.floor, want.ratio)
		}
		if !strings.Contains(r.Conditions, "floor: peer/temporal/") || !strings.Contains(r.Conditions, "JetStream") {
			t.Errorf("%s conditions %q: want both sides' persistence named", name, r.Conditions)
		}
	}
	if r := got["peer/temporal/tuned-fsync/activity/p50"]; r.Value != 5000 || r.Floor != nil {
		t.Errorf("peer row = %+v, want the peer's value without a floor", r)
	}
	if got["peer/vs-temporal/fsync/s1"].Better != Higher || got["peer/vs-temporal/fsync/p50"].Better != Lower {
		t.Errorf("throughput ratios must be higher-better and latency ratios lower-better")
	}
}

// TestPeerRowsBad checks that bad or short peer output is a clear error,
// not a table with holes.
func TestPeerRowsBad(t *testing.T) {
	for _, tc := range []struct {
		name, out, want string
	}{
		{"not json", "peers: starting\n", "peer output line 1"},
		{"no better", `{"name":"x","value":1,"unit":"µs"}` + "\n", "want name, unit and better"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parsePeerRows(strings.NewReader(tc.out))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	rows, err := parsePeerRows(strings.NewReader(peerOutput([]int{1})))
	if err != nil {
		t.Fatal(err)
	}
	o := ours{lat: map[string][]time.Duration{"fsync": {1}, "interval": {1}}, rate: map[string][]float64{"fsync": {1, 1}, "interval": {1, 1}}}
	if _, err := peerSamples(o, rows, []int{1, 16}); err == nil || !strings.Contains(err.Error(), "peer/temporal/tuned-fsync/activity/c16") {
		t.Fatalf("err = %v, want the missing row named", err)
	}
}

// TestFindPeerModule checks that the bench finds bench/peers from bench/
// (where go test runs) and that -peers adds exactly the peer benchmark.
func TestFindPeerModule(t *testing.T) {
	dir, err := findPeerModule()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(dir, "/bench/peers") {
		t.Errorf("dir = %s, want .../bench/peers", dir)
	}
	s := &suite{cfg: QuickConfig()}
	if len(s.peerBenchmarks()) != 0 {
		t.Errorf("peer benchmark without -peers")
	}
	s.cfg.Peers = true
	if b := s.peerBenchmarks(); len(b) != 1 || b[0].name != "peer/temporal" {
		t.Errorf("peer benchmarks = %+v, want peer/temporal", b)
	}
}

func TestFormatRatio(t *testing.T) {
	for v, want := range map[float64]string{0.028: "0.028×", 0.0412: "0.041×", 1.5: "1.50×", 34.29: "34.29×"} {
		if got := formatRatio(v); got != want {
			t.Errorf("formatRatio(%v) = %q, want %q", v, got, want)
		}
	}
}
