package opsmetrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestStatusClass(t *testing.T) {
	for status, want := range map[int]string{200: "2xx", 204: "2xx", 301: "3xx", 404: "4xx", 429: "4xx", 503: "5xx", 99: "other", 600: "other"} {
		if got := StatusClass(status); got != want {
			t.Errorf("StatusClass(%d) = %q, want %q", status, got, want)
		}
	}
}

// TestNilSetCountsNothing: every method of a nil *Set is a no-op, so a part
// built without metrics needs no check.
func TestNilSetCountsNothing(t *testing.T) {
	var s *Set
	s.HTTPRequest("/x", "GET", 200, "t", time.Millisecond)
	s.Task(TaskHanded, "t", 1)
	s.PollWaiting("t", 1)
	s.Appended(time.Millisecond)
	s.LeaseRenewed()
	s.LeaseLost()
	s.TookOver(1)
	s.IndexLag(3)
	if s.TenantLabels() {
		t.Fatal("a nil Set has tenant labels")
	}
}

// TestTenantLabelOnlyWhenAsked: the tenant label appears on the tenant's
// families only with tenantLabels, and a second Set on one registry is
// refused rather than counting twice.
func TestTenantLabelOnlyWhenAsked(t *testing.T) {
	for _, labels := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		s, err := New(reg, labels)
		if err != nil {
			t.Fatal(err)
		}
		s.HTTPRequest("/v1/sessions", "POST", 201, "acme", time.Millisecond)
		s.Task(TaskCompleted, "acme", 2)
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range fams {
			if f.GetName() != "callsheet_harness_tasks_total" {
				continue
			}
			for _, m := range f.Metric {
				got := map[string]string{}
				for _, l := range m.Label {
					got[l.GetName()] = l.GetValue()
				}
				_, hasTenant := got["tenant"]
				found = got["event"] == TaskCompleted && m.Counter.GetValue() == 2 && hasTenant == labels && (!labels || got["tenant"] == "acme")
			}
		}
		if !found {
			t.Errorf("tenant_labels=%v: callsheet_harness_tasks_total not counted as wanted: %v", labels, fams)
		}
		if _, err := New(reg, labels); err == nil {
			t.Errorf("a second Set on the same registry was accepted")
		}
	}
}
