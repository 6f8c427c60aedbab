package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/callsheet/callsheet/config"
)

// operator serves path from an operator's handler over e's node.
func (e *env) operator(path string) (int, []byte) {
	e.t.Helper()
	o := NewOperator()
	o.Serve(e.node)
	rec := httptest.NewRecorder()
	o.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, rec.Body.Bytes()
}

// families parses a text-format scrape.
func families(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, body)
	}
	return fams
}

// value returns the value of the series of fam with exactly labels.
func value(fam *dto.MetricFamily, labels map[string]string) (float64, bool) {
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			if got[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func tenantsConfig(tenantLabels bool) *config.Config {
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "acme-tok"}, "globex": {Token: "globex-tok"}}
	cfg.Metrics.TenantLabels = tenantLabels
	return &cfg
}

// TestTenantReadsNoMetrics: a node's metrics count every tenant's work
// (tool names, rules, volumes), so a tenant's token reads none of them; the
// operator's listener serves them.
func TestTenantReadsNoMetrics(t *testing.T) {
	e := newEnv(t, tenantsConfig(false))
	e.token = "acme-tok"
	status, b := e.do("GET", "/metrics", "")
	wantError(t, status, b, http.StatusNotFound, CodeNotFound, "--metrics-listen")
	if code, body := e.operator("/metrics"); code != http.StatusOK || !strings.Contains(string(body), "callsheet_calls_total") && !strings.Contains(string(body), "# TYPE callsheet_") {
		t.Fatalf("operator's /metrics: %d %.300s", code, body)
	}
}

// TestHTTPRequestsCounted: every request is counted by the pattern of the
// route that served it (never the path with its ids), its method and its
// status class; refusals and unknown routes too. The tenant label appears
// only with metrics.tenant_labels.
func TestHTTPRequestsCounted(t *testing.T) {
	for _, labels := range []bool{false, true} {
		e := newEnv(t, tenantsConfig(labels))
		e.token = "acme-tok"
		s := e.open()
		e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"calls":[{"id":"c","name":"read","arguments":{"path":"."}}]}`, http.StatusOK, nil)
		e.do("GET", "/v1/sessions/NOSUCH", "")
		e.do("GET", "/no/such/route", "")
		e.token = "wrong"
		e.do("GET", "/v1/sessions", "")

		_, body := e.operator("/metrics")
		fams := families(t, body)
		reqs := fams["callsheet_http_requests_total"]
		with := func(route, method, code string) map[string]string {
			l := map[string]string{"route": route, "method": method, "code": code}
			if labels {
				l["tenant"] = "acme"
			}
			return l
		}
		for _, want := range []map[string]string{
			with("/v1/sessions", "POST", "2xx"),
			with("/v1/sessions/{s}/turns", "POST", "2xx"),
			with("/v1/sessions/{s}", "GET", "4xx"),
		} {
			if v, ok := value(reqs, want); !ok || v != 1 {
				t.Errorf("tenant_labels=%v: callsheet_http_requests_total%v = %v (found %v), want 1\n%s", labels, want, v, ok, body)
			}
		}
		unauth := map[string]string{"route": "/v1/sessions", "method": "GET", "code": "4xx"}
		unmatched := map[string]string{"route": "unmatched", "method": "GET", "code": "4xx"}
		if labels {
			unauth["tenant"], unmatched["tenant"] = "", ""
		}
		for _, want := range []map[string]string{unauth, unmatched} {
			if v, ok := value(reqs, want); !ok || v != 1 {
				t.Errorf("tenant_labels=%v: callsheet_http_requests_total%v = %v (found %v), want 1", labels, want, v, ok)
			}
		}
		if v, ok := value(fams["callsheet_http_request_duration_seconds"], map[string]string{"route": "/v1/sessions/{s}/turns", "method": "POST"}); !ok || v != 1 {
			t.Errorf("duration of the turn: %v %v", v, ok)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.Contains(line, s.Session) || strings.Contains(line, "acme-tok") || (!labels && strings.Contains(line, "acme")) {
				t.Errorf("tenant_labels=%v: a series names an id, a token or a tenant: %s", labels, line)
			}
		}
	}
}

// TestOperatorReadyz: /readyz says ready while the node serves, and why
// not (starting, shutting down) otherwise; /healthz answers throughout;
// other paths are 404.
func TestOperatorReadyz(t *testing.T) {
	e := newEnv(t, nil)
	o := NewOperator()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		o.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"not_ready"`) || !strings.Contains(body, "starting") {
		t.Errorf("readyz before the node: %d %s", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Errorf("metrics before the node: %d %s", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("healthz before the node: %d", code)
	}
	o.Serve(e.node)
	if code, body := get("/readyz"); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ready"}` {
		t.Errorf("readyz: %d %s", code, body)
	}
	if err := e.node.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/nope"); code != http.StatusNotFound || !strings.Contains(body, "/readyz") {
		t.Errorf("unknown path: %d %s", code, body)
	}
	if err := e.node.Close(); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("readyz after Close: %d %s", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("healthz after Close: %d", code)
	}
}
