package actors

import (
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callsheet/callsheet/events"
)

// TestApprovalMetricsCarryNoIdentity: whoever decided, the approvals
// counter's decider label is only the kind of decider.
func TestApprovalMetricsCarryNoIdentity(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	for _, p := range []any{
		&events.ApprovalGranted{Name: "write", By: "alice@example.com"},
		&events.ApprovalDenied{Name: "write", By: "bob"},
		&events.ApprovalDenied{Name: "write", By: ApprovalTimeoutBy},
	} {
		typ := events.TypeApprovalGranted
		if _, ok := p.(*events.ApprovalDenied); ok {
			typ = events.TypeApprovalDenied
		}
		m.decided(events.Event{Type: typ}, p)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "callsheet_approvals_total" {
			continue
		}
		for _, mm := range f.GetMetric() {
			key := ""
			for _, l := range mm.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			got[key] = mm.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"decider=principal,decision=allow,tool=write,": 1,
		"decider=principal,decision=deny,tool=write,":  1,
		"decider=timeout,decision=deny,tool=write,":    1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("callsheet_approvals_total=%v, want %v", got, want)
	}
}
