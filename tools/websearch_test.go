package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callsheet/callsheet/tool"
)

// searchBackend is a fake search backend that records what it was asked.
type searchBackend struct {
	mu       sync.Mutex
	requests []SearchRequest
	headers  []http.Header
	answer   func(w http.ResponseWriter, req SearchRequest)
}

func (b *searchBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req SearchRequest
	data, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || json.Unmarshal(data, &req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	b.requests = append(b.requests, req)
	b.headers = append(b.headers, r.Header.Clone())
	b.mu.Unlock()
	b.answer(w, req)
}

// echoAnswer answers each query with max_results items derived from it, in
// reverse order of the queries to show the tool restores the call's order.
func echoAnswer(w http.ResponseWriter, req SearchRequest) {
	var resp SearchResponse
	for i := len(req.Queries) - 1; i >= 0; i-- {
		q := req.Queries[i]
		r := SearchResults{Query: q}
		for j := 1; j <= req.MaxResults+2; j++ { // more than asked for
			r.Items = append(r.Items, SearchItem{
				Title:   fmt.Sprintf("%s result %d", q, j),
				URL:     fmt.Sprintf("https://example.com/%s/%d", strings.ReplaceAll(q, " ", "-"), j),
				Snippet: "about\n" + q,
			})
		}
		resp.Results = append(resp.Results, r)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

func newSearch(t *testing.T, answer func(http.ResponseWriter, SearchRequest), opts ...SearchOption) (*tool.Tool, *searchBackend, string) {
	t.Helper()
	b := &searchBackend{answer: answer}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	tl, err := WebSearch(srv.URL+"/search?key=s3cr3t-value", opts...)
	if err != nil {
		t.Fatalf("WebSearch: %v", err)
	}
	return tl, b, srv.URL
}

func TestWebSearchBatched(t *testing.T) {
	tl, b, _ := newSearch(t, echoAnswer)
	want := tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}
	if tl.Name != "web_search" || tl.Declarations != want || len(tl.Labels) != 1 || tl.Labels[0] != tool.LabelExternal {
		t.Errorf("tool %q %+v %v, want web_search %+v [external]", tl.Name, tl.Declarations, tl.Labels, want)
	}
	ctx := tool.WithCall(context.Background(), tool.Call{IdempotencyKey: "idem-9"})
	r, err := call(t, ctx, tl, `{"queries": ["go generics", " nats jetstream "], "max_results": 2}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.requests) != 1 {
		t.Fatalf("backend got %d requests, want 1 batch", len(b.requests))
	}
	if got := b.requests[0]; fmt.Sprint(got.Queries) != "[go generics nats jetstream]" || got.MaxResults != 2 {
		t.Errorf("request=%+v, want both queries trimmed and max_results 2", got)
	}
	if got := b.headers[0].Get("Idempotency-Key"); got != "idem-9" {
		t.Errorf("Idempotency-Key=%q, want idem-9", got)
	}
	if len(r.Parts) != 2 || r.Parts[0].Type != tool.PartJSON || r.Parts[1].Type != tool.PartText {
		t.Fatalf("parts=%+v, want a JSON part and a text part", r.Parts)
	}
	var got SearchResponse
	if err := json.Unmarshal(r.Parts[0].JSON, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Results) != 2 || got.Results[0].Query != "go generics" || got.Results[1].Query != "nats jetstream" {
		t.Fatalf("results=%+v, want go generics then nats jetstream", got.Results)
	}
	for _, q := range got.Results {
		if len(q.Items) != 2 {
			t.Errorf("query %q has %d items, want max_results 2", q.Query, len(q.Items))
		}
	}
	wantText := "## go generics\n" +
		"1. go generics result 1\n   https://example.com/go-generics/1\n   about go generics\n" +
		"2. go generics result 2\n   https://example.com/go-generics/2\n   about go generics\n" +
		"\n## nats jetstream\n" +
		"1. nats jetstream result 1\n   https://example.com/nats-jetstream/1\n   about nats jetstream\n" +
		"2. nats jetstream result 2\n   https://example.com/nats-jetstream/2\n   about nats jetstream\n"
	if r.Parts[1].Text != wantText {
		t.Errorf("text=\n%s\nwant\n%s", r.Parts[1].Text, wantText)
	}

	// max_results defaults to 5.
	if _, err := call(t, context.Background(), tl, `{"queries": ["x"]}`); err != nil {
		t.Fatal(err)
	}
	if got := b.requests[1].MaxResults; got != DefaultSearchResults {
		t.Errorf("default max_results=%d, want %d", got, DefaultSearchResults)
	}
}

func TestWebSearchArguments(t *testing.T) {
	tl, b, _ := newSearch(t, echoAnswer)
	many := `["1","2","3","4","5","6","7","8","9","10","11"]`
	tests := []struct {
		name, args, want string
		invalid          bool
	}{
		{name: "empty", args: `{"queries": []}`, want: "queries is empty"},
		{name: "too many", args: `{"queries": ` + many + `}`, want: "11 queries, at most 10"},
		{name: "blank query", args: `{"queries": ["ok", "  "]}`, want: "queries[1] is empty"},
		{name: "missing", args: `{}`, invalid: true},
		{name: "max_results over 20", args: `{"queries": ["a"], "max_results": 21}`, invalid: true},
		{name: "not strings", args: `{"queries": [1]}`, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.invalid {
				if err := tl.Validate(json.RawMessage(tt.args)); err == nil {
					t.Fatalf("Validate(%s)=nil, want an error", tt.args)
				}
				return
			}
			_, err := call(t, context.Background(), tl, tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err=%v, want one containing %q", err, tt.want)
			}
		})
	}
	if len(b.requests) != 0 {
		t.Errorf("backend got %d requests for invalid calls, want 0", len(b.requests))
	}
}

func TestWebSearchBackendErrors(t *testing.T) {
	tests := []struct {
		name   string
		answer func(http.ResponseWriter, SearchRequest)
		want   []string
	}{
		{
			name: "status",
			answer: func(w http.ResponseWriter, _ SearchRequest) {
				http.Error(w, "quota exceeded", http.StatusTooManyRequests)
			},
			want: []string{"answered 429 Too Many Requests", `"quota exceeded"`},
		},
		{
			name:   "not json",
			answer: func(w http.ResponseWriter, _ SearchRequest) { fmt.Fprint(w, "<html>oops</html>") },
			want:   []string{"malformed JSON", "<html>oops</html>", `expected {"results": [`},
		},
		{
			name:   "no results field",
			answer: func(w http.ResponseWriter, _ SearchRequest) { fmt.Fprint(w, `{"hits": []}`) },
			want:   []string{`malformed JSON (no "results" field)`},
		},
		{
			name:   "wrong shape",
			answer: func(w http.ResponseWriter, _ SearchRequest) { fmt.Fprint(w, `{"results": {"query": "x"}}`) },
			want:   []string{"malformed JSON", "cannot unmarshal object"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, _, base := newSearch(t, tt.answer)
			_, err := call(t, context.Background(), tl, `{"queries": ["x"]}`)
			if err == nil {
				t.Fatal("err=nil, want a backend error")
			}
			mustContain(t, err.Error(), tt.want...)
			mustContain(t, err.Error(), base+"/search?…")
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error %q shows the endpoint's query string", err)
			}
		})
	}
}

func TestWebSearchMissingAndUnechoedQueries(t *testing.T) {
	tl, _, _ := newSearch(t, func(w http.ResponseWriter, req SearchRequest) {
		// Answers in order without echoing queries, and only the first.
		fmt.Fprint(w, `{"results": [{"items": [{"title": "T", "url": "https://t.example/"}]}], "extra": true}`)
	})
	r, err := call(t, context.Background(), tl, `{"queries": ["first", "second"]}`)
	if err != nil {
		t.Fatal(err)
	}
	var got SearchResponse
	if err := json.Unmarshal(r.Parts[0].JSON, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Results) != 2 || len(got.Results[1].Items) != 0 {
		t.Fatalf("results=%+v, want two entries, the second empty", got.Results)
	}
	mustContain(t, r.Parts[1].Text, "## second\n(no results)\n")
}

func TestWebSearchTimeout(t *testing.T) {
	release := make(chan struct{})
	tl, _, _ := newSearch(t, func(w http.ResponseWriter, _ SearchRequest) { <-release }, WithSearchTimeout(100*time.Millisecond))
	defer close(release)
	_, err := call(t, context.Background(), tl, `{"queries": ["x"]}`)
	if err == nil || !strings.Contains(err.Error(), "did not answer within 100ms") {
		t.Fatalf("err=%v, want a timeout", err)
	}
}

func TestWebSearchConstruction(t *testing.T) {
	if _, err := WebSearch(""); !errors.Is(err, ErrNoSearchBackend) {
		t.Errorf(`WebSearch("") err=%v, want ErrNoSearchBackend`, err)
	}
	mustContain(t, ErrNoSearchBackend.Error(), "web.search_endpoint")
	for _, ep := range []string{"ftp://x/search", "/search", "http://", "::"} {
		if _, err := WebSearch(ep); !errors.Is(err, ErrInvalidWebOption) {
			t.Errorf("WebSearch(%q) err=%v, want ErrInvalidWebOption", ep, err)
		}
	}
	if _, err := WebSearch("https://search.example/api", WithSearchTimeout(0)); !errors.Is(err, ErrInvalidWebOption) {
		t.Errorf("WithSearchTimeout(0): err=%v, want ErrInvalidWebOption", err)
	}
	if _, err := WebSearch("https://search.example/api", WithSearchClient(nil)); !errors.Is(err, ErrInvalidWebOption) {
		t.Errorf("WithSearchClient(nil): err=%v, want ErrInvalidWebOption", err)
	}
}
