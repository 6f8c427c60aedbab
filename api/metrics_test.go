package api

import (
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsNegotiateOpenMetrics: /metrics answers OpenMetrics to a client
// that asks for it, as Prometheus does by default, and the classic text
// format otherwise; each answer's content type is parsed and checked
// against its body.
func TestMetricsNegotiateOpenMetrics(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"calls":[{"id":"c","name":"read","arguments":{"path":"."}}]}`, http.StatusOK, nil)
	get := func(accept string) (mediaType string, params map[string]string, body string) {
		t.Helper()
		req := e.request("GET", "/metrics", "")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics (Accept %q): %d %v %.200s", accept, resp.StatusCode, err, b)
		}
		mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if err != nil {
			t.Fatalf("content type %q: %v", resp.Header.Get("Content-Type"), err)
		}
		return mt, params, string(b)
	}

	// What Prometheus 2.x/3.x sends when it scrapes.
	mt, params, body := get("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
	if mt != "application/openmetrics-text" || params["version"] == "" {
		t.Fatalf("asked for OpenMetrics, got %s %v", mt, params)
	}
	if !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("an OpenMetrics body ends with # EOF; this one ends %q", body[max(0, len(body)-40):])
	}
	// Every line is a descriptor (# TYPE, # HELP, # UNIT), a sample, or the
	// final # EOF, as OpenMetrics 1.0 allows.
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	for i, line := range lines {
		switch {
		case strings.HasPrefix(line, "# TYPE "), strings.HasPrefix(line, "# HELP "), strings.HasPrefix(line, "# UNIT "):
		case line == "# EOF" && i == len(lines)-1:
		case line != "" && !strings.HasPrefix(line, "#") && len(strings.Fields(line)) >= 2:
		default:
			t.Fatalf("OpenMetrics line %d is %q", i+1, line)
		}
	}
	if !strings.Contains(body, "# TYPE callsheet_calls counter\n") || !strings.Contains(body, "callsheet_calls_total{") {
		t.Errorf("OpenMetrics body does not show callsheet_calls as a counter family:\n%.600s", body)
	}

	// No Accept, or only the text format: the classic text format.
	for _, accept := range []string{"", "text/plain"} {
		mt, params, body := get(accept)
		if mt != "text/plain" || params["version"] != "0.0.4" {
			t.Errorf("Accept %q: got %s %v, want text/plain version 0.0.4", accept, mt, params)
		}
		if strings.Contains(body, "# EOF") {
			t.Errorf("Accept %q: a text-format body with an OpenMetrics # EOF", accept)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		if _, err := parser.TextToMetricFamilies(strings.NewReader(body)); err != nil {
			t.Errorf("Accept %q: the text body does not parse: %v", accept, err)
		}
	}
}
