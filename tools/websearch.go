package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/callsheet/callsheet/tool"
)

// Limits of the web_search tool.
const (
	// MaxSearchQueries is how many queries one web_search call may batch.
	MaxSearchQueries = 10
	// DefaultSearchResults is how many results per query a call gets when
	// it gives no max_results; MaxSearchResults is the most it may ask for.
	DefaultSearchResults = 5
	MaxSearchResults     = 20
	// DefaultSearchTimeout bounds one request to the search backend.
	DefaultSearchTimeout = 30 * time.Second
	// maxSearchResponse caps the backend's response body (4 MiB).
	maxSearchResponse = 4 << 20
)

// ErrNoSearchBackend is returned by WebSearch for an empty endpoint: without
// config web.search_endpoint there is no backend, and the runtime should
// leave web_search out of the tool surface.
var ErrNoSearchBackend = errors.New("tools: web_search is unavailable: no search backend is configured (set web.search_endpoint)")

// SearchOption configures the web_search tool built by WebSearch.
type SearchOption func(*searcher) error

// WithSearchClient sets the HTTP client used to reach the backend (default:
// a client with no overall timeout; DefaultSearchTimeout bounds each call).
func WithSearchClient(c *http.Client) SearchOption {
	return func(s *searcher) error {
		if c == nil {
			return fmt.Errorf("%w: WithSearchClient: nil client", ErrInvalidWebOption)
		}
		s.client = c
		return nil
	}
}

// WithSearchTimeout sets how long one call waits for the backend (default
// DefaultSearchTimeout); it must be positive.
func WithSearchTimeout(d time.Duration) SearchOption {
	return func(s *searcher) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithSearchTimeout: %s is not positive", ErrInvalidWebOption, d)
		}
		s.timeout = d
		return nil
	}
}

// webSearchArgs are the web_search tool's arguments.
type webSearchArgs struct {
	Queries    []string `json:"queries" jsonschema:"1 to 10 search queries, run as one batch"`
	MaxResults int      `json:"max_results,omitempty" jsonschema:"results per query (default 5, at most 20)" default:"5" minimum:"1" maximum:"20"`
}

// SearchRequest is the JSON body web_search POSTs to its backend.
type SearchRequest struct {
	Queries    []string `json:"queries"`
	MaxResults int      `json:"max_results"`
}

// SearchResponse is the JSON body web_search expects back: one entry per
// query. Unknown fields are ignored.
type SearchResponse struct {
	Results []SearchResults `json:"results"`
}

// SearchResults are the results of one query.
type SearchResults struct {
	Query string       `json:"query"`
	Items []SearchItem `json:"items"`
}

// SearchItem is one search result.
type SearchItem struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet"`
}

// WebSearch builds the web_search tool over the backend at endpoint (config
// web.search_endpoint): read_only, safe, parallel_safe, labelled external.
// A call POSTs a SearchRequest as JSON and expects a SearchResponse; its
// result is one JSON part holding a SearchResponse (one entry per query, in
// the call's order, at most max_results items each) and one text part
// rendering it. The contract is in docs/tools/web_search.md. The endpoint is
// the operator's, so it is not subject to webfetch's address checks.
//
// WebSearch returns ErrNoSearchBackend for an empty endpoint, and an error
// wrapping ErrInvalidWebOption for an endpoint that is not an absolute
// http(s) URL or an option that cannot apply. A call fails with an error
// naming the backend's status for a non-2xx response, and with one saying
// what was expected for a body that is not a SearchResponse. The tool is
// safe for concurrent use.
func WebSearch(endpoint string, opts ...SearchOption) (*tool.Tool, error) {
	if strings.TrimSpace(endpoint) == "" {
		return nil, ErrNoSearchBackend
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: search endpoint %q is not an absolute http or https URL", ErrInvalidWebOption, redactURL(endpoint))
	}
	s := &searcher{endpoint: u, client: &http.Client{}, timeout: DefaultSearchTimeout}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	return tool.New("web_search",
		"Search the web. Takes 1 to 10 queries in one call, run as a batch, and returns up to max_results "+
			"results for each (title, URL and snippet).",
		s.run,
		tool.WithWorkspaceFree(), tool.WithShortDescription("Batched web search."),
		tool.WithGuidelines(
			"Use web_search for facts you do not know or that may have changed; put related queries in one call.",
			"Follow up with webfetch on the most relevant URLs rather than relying on snippets alone.",
		),
		tool.WithSnippet(`{"queries": ["go 1.26 release notes", "go iterator proposal"], "max_results": 5}`),
		tool.WithDeclarations(tool.Declarations{
			Effect:      tool.EffectReadOnly,
			Replay:      tool.ReplaySafe,
			Concurrency: tool.ConcurrencyParallelSafe,
		}),
		tool.WithLabels(tool.LabelExternal),
		tool.WithTimeout(s.timeout+webTimeoutSlack),
	)
}

// searcher is one web_search tool's backend; safe for concurrent use.
type searcher struct {
	endpoint *url.URL
	client   *http.Client
	timeout  time.Duration
}

// run is the web_search tool's function.
func (s *searcher) run(ctx context.Context, a webSearchArgs) (tool.Result, error) {
	if err := ctx.Err(); err != nil {
		return tool.Result{}, err
	}
	switch {
	case len(a.Queries) == 0:
		return tool.Result{}, errors.New("web_search: queries is empty; give 1 to 10 queries")
	case len(a.Queries) > MaxSearchQueries:
		return tool.Result{}, fmt.Errorf("web_search: %d queries, at most %d per call; split them over several calls", len(a.Queries), MaxSearchQueries)
	}
	queries := make([]string, len(a.Queries))
	for i, q := range a.Queries {
		if queries[i] = strings.TrimSpace(q); queries[i] == "" {
			return tool.Result{}, fmt.Errorf("web_search: queries[%d] is empty", i)
		}
	}
	n := a.MaxResults
	if n <= 0 {
		n = DefaultSearchResults
	}
	n = min(n, MaxSearchResults)

	resp, err := s.query(ctx, SearchRequest{Queries: queries, MaxResults: n})
	if err != nil {
		return tool.Result{}, err
	}

	// One entry per query asked, in that order, whatever order the backend
	// answered in; a query it did not answer has no items.
	byQuery := make(map[string][]SearchItem, len(resp.Results))
	for i, r := range resp.Results {
		q := strings.TrimSpace(r.Query)
		if q == "" && len(resp.Results) == len(queries) {
			q = queries[i] // a backend that answers in order without echoing
		}
		if _, seen := byQuery[q]; !seen {
			byQuery[q] = r.Items
		}
	}
	out := SearchResponse{Results: make([]SearchResults, len(queries))}
	for i, q := range queries {
		items := byQuery[q]
		if len(items) > n {
			items = items[:n]
		}
		if items == nil {
			items = []SearchItem{}
		}
		out.Results[i] = SearchResults{Query: q, Items: items}
	}
	j, err := json.Marshal(out)
	if err != nil {
		return tool.Result{}, fmt.Errorf("web_search: encode results: %w", err)
	}
	return tool.Result{Parts: []tool.Part{
		{Type: tool.PartJSON, JSON: j},
		{Type: tool.PartText, Text: renderSearch(out)},
	}}, nil
}

// query sends one request to the backend and decodes its answer.
func (s *searcher) query(ctx context.Context, body SearchRequest) (*SearchResponse, error) {
	where := redactURL(s.endpoint.String())
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("web_search: encode request: %w", err)
	}
	qctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(qctx, http.MethodPost, s.endpoint.String(), bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("web_search: backend %s: %w", where, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", DefaultWebUserAgent)
	if call, ok := tool.CallFrom(ctx); ok && call.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", call.IdempotencyKey)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("web_search: the search backend %s did not answer within %s", where, s.timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("web_search: cannot reach the search backend %s: %w", where, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxSearchResponse+1))
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("web_search: read the answer of the search backend %s: %w", where, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("web_search: the search backend %s answered %s: %s", where, resp.Status, excerpt(data, 200))
	}
	if len(data) > maxSearchResponse {
		return nil, fmt.Errorf("web_search: the search backend %s answered with more than %d bytes", where, maxSearchResponse)
	}
	var out SearchResponse
	var probe struct {
		Results json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(data, &probe); err != nil || len(probe.Results) == 0 || string(probe.Results) == "null" {
		why := `no "results" field`
		if err != nil {
			why = err.Error()
		}
		return nil, fmt.Errorf(`web_search: the search backend %s answered malformed JSON (%s): %s; `+
			`expected {"results": [{"query": "...", "items": [{"title": "...", "url": "...", "snippet": "..."}]}]}`,
			where, why, excerpt(data, 200))
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf(`web_search: the search backend %s answered malformed JSON (%s): %s; `+
			`expected {"results": [{"query": "...", "items": [{"title": "...", "url": "...", "snippet": "..."}]}]}`,
			where, err, excerpt(data, 200))
	}
	return &out, nil
}

// renderSearch writes results as text: a heading per query, numbered items.
func renderSearch(r SearchResponse) string {
	var b strings.Builder
	for i, q := range r.Results {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "## %s\n", q.Query)
		if len(q.Items) == 0 {
			b.WriteString("(no results)\n")
			continue
		}
		for j, it := range q.Items {
			title := oneLine(it.Title)
			if title == "" {
				title = "(untitled)"
			}
			fmt.Fprintf(&b, "%d. %s\n   %s\n", j+1, title, oneLine(it.URL))
			if sn := oneLine(it.Snippet); sn != "" {
				fmt.Fprintf(&b, "   %s\n", sn)
			}
		}
	}
	return b.String()
}

// oneLine collapses whitespace, newlines included.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// excerpt returns the start of a body for an error message, on one line.
func excerpt(b []byte, n int) string {
	s := oneLine(strings.ToValidUTF8(string(b), "\uFFFD"))
	if s == "" {
		return "(empty body)"
	}
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return fmt.Sprintf("%q", s)
}

// redactURL returns a URL for messages without its user information and
// query, where credentials tend to live.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment = ""
	return u.String()
}
