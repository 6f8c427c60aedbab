package natslog

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/jsensure"
	"github.com/callsheet/callsheet/projections"
)

// The session search index (docs/audit.md, "Finding sessions"): a KV bucket
// kept as the log is written, so that GET /v1/sessions and replay --list read
// the index, never the sessions' logs. Keys, for a session S of tenant T
// opened on UTC day D (YYYYMMDD):
//
//	T.s.D.S               the session's summary (projections.Summary, JSON)
//	T.d.D                 tenant T opened sessions on day D
//	T.m.TOOL.O.D.S        a call of TOOL in S ended with outcome O, or was
//	                      received (O = called)
//	T.md.TOOL.O.D         some session of day D has that marker
//
// A query lists the day markers of what it filters on (one small listing),
// then walks those days newest first, listing the session markers of each
// day (a subject-filtered listing the server answers from its subject
// index) until it has a page; a query without filters walks T.s.D.*. What a
// page costs grows with the sessions of the days it walks, not with the
// whole log. Tool names that are not key tokens are encoded (toolToken).

// DefaultSearchBucket is the KV bucket of the session search index.
const DefaultSearchBucket = "cs_search"

// Limits of a query.
const (
	// DefaultSearchLimit is a page's size when the query gives none.
	DefaultSearchLimit = 50
	// MaxSearchLimit is the largest page.
	MaxSearchLimit = 1000
)

// Errors of the search index.
var (
	// ErrBadQuery is wrapped by Find's error for a query it cannot answer:
	// an unknown outcome, a limit out of range, since after until, or a
	// cursor that is not one Find gave for the same filters.
	ErrBadQuery = errors.New("natslog: bad session query")
	// ErrNoSearchIndex is returned by OpenSearch when the bucket does not
	// exist (a node creates it at start).
	ErrNoSearchIndex = errors.New("natslog: no session search index")
)

// Search is the session search index. It is safe for concurrent use.
type Search struct {
	kv jetstream.KeyValue
	nc *nats.Conn
	// direct is the subject of the bucket's direct gets.
	direct string

	mu   sync.Mutex
	days map[string]bool // day markers known to be stored
}

// Search creates (or updates) the KV bucket DefaultSearchBucket, file-backed
// with the Log's replica count, and returns the index on it.
func (l *Log) Search(ctx context.Context) (*Search, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	kv, err := ensureKV(ctx, l.js, jetstream.KeyValueConfig{
		Bucket:      DefaultSearchBucket,
		Description: "callsheet session search index",
		Storage:     jetstream.FileStorage,
		Replicas:    l.cfg.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natslog: session search index %s: %w", DefaultSearchBucket, err)
	}
	return newSearch(l.js, kv), nil
}

func newSearch(js jetstream.JetStream, kv jetstream.KeyValue) *Search {
	return &Search{kv: kv, nc: js.Conn(), direct: jsensure.APIPrefix(js) + "DIRECT.GET.KV_" + DefaultSearchBucket, days: map[string]bool{}}
}

// OpenSearch opens an existing index without creating or changing anything
// (for readers such as cmd/callsheet-replay). It returns ErrNoSearchIndex when there
// is none.
func OpenSearch(ctx context.Context, js jetstream.JetStream) (*Search, error) {
	kv, err := js.KeyValue(ctx, DefaultSearchBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: the store has no bucket %s (a node makes it at start and fills it from the logs)", ErrNoSearchIndex, DefaultSearchBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("natslog: session search index %s: %w", DefaultSearchBucket, err)
	}
	return newSearch(js, kv), nil
}

// day is the key token of the UTC day t falls on.
func day(t time.Time) string { return t.UTC().Format("20060102") }

var toolTokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// toolToken is a tool name as a key token: the name itself when it is a
// registered tool's (letters, digits, '_', '-', at most 64), else '=' and
// its base64url, or for a name over 96 bytes "==" and the base64url of its
// SHA-256. A model may call any name; each maps to one token, and no two
// names to the same one.
func toolToken(name string) string {
	if toolTokenRE.MatchString(name) {
		return name
	}
	if len(name) > 96 {
		sum := sha256.Sum256([]byte(name))
		return "==" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// Stored returns the summary the index holds for a session, with its
// revision (for Put); ok is false when it holds none. opened is the day the
// caller expects the session under; a zero opened looks the session up by
// its id alone (a listing).
func (x *Search) Stored(ctx context.Context, tenant, session string, opened time.Time) (s *projections.Summary, rev uint64, ok bool, err error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return nil, 0, false, err
	}
	key := ""
	if !opened.IsZero() {
		key = tenant + ".s." + day(opened) + "." + session
	} else {
		keys, _, err := x.matching(ctx, tenant+".s.*."+session)
		if err != nil || len(keys) == 0 {
			return nil, 0, false, err
		}
		key = keys[0]
	}
	e, err := x.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("search index: get %s: %w", key, err)
	}
	var sum projections.Summary
	if err := json.Unmarshal(e.Value(), &sum); err != nil {
		return nil, 0, false, fmt.Errorf("search index: %s holds no summary: %w", key, err)
	}
	return &sum, e.Revision(), true, nil
}

// ErrStaleSummary is returned by Put when the index holds a summary of the
// session that is as new as the one given, or newer (another node wrote
// it): the caller keeps the stored one.
var ErrStaleSummary = errors.New("natslog: the search index holds a newer summary")

// Put files a session's summary: its markers first (so a summary never
// names one that is not stored), then the summary itself, guarded by rev
// (the revision Stored returned; 0 for a session the index does not hold).
// It returns the new revision, or ErrStaleSummary when another writer got
// there first with a summary at least as new. A summary of a session not
// yet opened is not filed.
func (x *Search) Put(ctx context.Context, s *projections.Summary, rev uint64) (uint64, error) {
	if err := ValidateIDs(s.Tenant, s.Session); err != nil {
		return 0, err
	}
	if s.Opened.IsZero() {
		return rev, nil
	}
	d := day(s.Opened)
	var marks []string
	for _, m := range s.Markers() {
		tok := toolToken(m[0])
		marks = append(marks, s.Tenant+".m."+tok+"."+m[1]+"."+d+"."+s.Session)
		x.dayMarker(ctx, &marks, s.Tenant+".md."+tok+"."+m[1]+"."+d)
	}
	x.dayMarker(ctx, &marks, s.Tenant+".d."+d)
	for _, k := range marks {
		if _, err := x.kv.Put(ctx, k, nil); err != nil {
			return 0, fmt.Errorf("search index: put %s: %w", k, err)
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return 0, err
	}
	key := s.Tenant + ".s." + d + "." + s.Session
	for {
		var next uint64
		if rev == 0 {
			next, err = x.kv.Create(ctx, key, b)
		} else {
			next, err = x.kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			x.rememberDays(marks)
			return next, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLast(err) {
			return 0, fmt.Errorf("search index: put %s: %w", key, err)
		}
		// Someone else wrote it: keep theirs if it is as new.
		stored, srev, ok, gerr := x.Stored(ctx, s.Tenant, s.Session, s.Opened)
		if gerr != nil {
			return 0, gerr
		}
		if ok && stored.Seq >= s.Seq {
			x.rememberDays(marks)
			return srev, ErrStaleSummary
		}
		rev = srev
	}
}

func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == codeWrongLastSeq || apiErr.ErrorCode == codeWrongLastSeqConstant)
}

// dayMarker adds key to marks unless it is known to be stored.
func (x *Search) dayMarker(_ context.Context, marks *[]string, key string) {
	x.mu.Lock()
	known := x.days[key]
	x.mu.Unlock()
	if !known {
		*marks = append(*marks, key)
	}
}

func (x *Search) rememberDays(marks []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.days) > 100_000 {
		clear(x.days) // a miss only costs a put
	}
	for _, k := range marks {
		if strings.Contains(k, ".d.") || strings.Contains(k, ".md.") {
			x.days[k] = true
		}
	}
}

// keys lists the keys matching filter (NATS subject wildcards), in no
// particular order.
func (x *Search) keys(ctx context.Context, filter string) ([]string, error) {
	l, err := x.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("search index: list %s: %w", filter, err)
	}
	defer func() { _ = l.Stop() }()
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// maxMultiLast is the most subjects one multi-subject direct get answers
// (nats-server refuses more with 413).
const maxMultiLast = 1024

// multiLast returns the value of every key matching filters (NATS subject
// wildcards) with one multi-subject direct get, keyed by key: no consumer,
// one round trip. complete is false when the server would not answer it
// whole (more than maxMultiLast keys match, or the answer was cut at its
// byte limit); the caller then lists the keys instead.
func (x *Search) multiLast(ctx context.Context, filters []string) (vals map[string][]byte, complete bool, err error) {
	subjects := make([]string, len(filters))
	for i, f := range filters {
		subjects[i] = "$KV." + DefaultSearchBucket + "." + f
	}
	req, _ := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
	}{subjects})
	inbox := x.nc.NewRespInbox()
	sub, err := x.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := x.nc.PublishRequest(x.direct, inbox, req); err != nil {
		return nil, false, err
	}
	prefix := len("$KV." + DefaultSearchBucket + ".")
	vals = map[string][]byte{}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("search index: get %v: %w", filters, err)
		}
		switch st := m.Header.Get("Status"); st {
		case "":
		case "204": // end of the answer
			pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			return vals, pending == 0, nil
		case "404": // nothing matches
			return vals, true, nil
		case "413": // too many match
			return nil, false, nil
		default:
			return nil, false, fmt.Errorf("search index: get %v: status %s %s", filters, st, m.Header.Get("Description"))
		}
		subj := m.Header.Get(jetstream.SubjectHeader)
		if len(subj) <= prefix || m.Header.Get("KV-Operation") != "" {
			continue // a deleted or purged key
		}
		vals[subj[prefix:]] = m.Data
	}
}

// matching returns the keys matching filter and, when the one direct get
// that lists them had their values too, those values; else it lists the
// keys with a consumer (values nil).
func (x *Search) matching(ctx context.Context, filter string) ([]string, map[string][]byte, error) {
	vals, complete, err := x.multiLast(ctx, []string{filter})
	if err != nil {
		return nil, nil, err
	}
	if complete {
		keys := make([]string, 0, len(vals))
		for k := range vals {
			keys = append(keys, k)
		}
		return keys, vals, nil
	}
	keys, err := x.keys(ctx, filter)
	return keys, nil, err
}

// summaries returns the stored summaries of sessions by id (all of one
// tenant and day): in direct gets of up to maxMultiLast keys each.
func (x *Search) summaries(ctx context.Context, tenant, dayToken string, ids []string) (map[string]*projections.Summary, error) {
	out := make(map[string]*projections.Summary, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), maxMultiLast)
		keys := make([]string, n)
		for i, id := range ids[:n] {
			keys[i] = tenant + ".s." + dayToken + "." + id
		}
		vals, complete, err := x.multiLast(ctx, keys)
		if err != nil {
			return nil, err
		}
		if !complete {
			for _, id := range ids[:n] { // one by one
				s, _, ok, err := x.Stored(ctx, tenant, id, dayTime(dayToken))
				if err != nil {
					return nil, err
				}
				if ok {
					out[id] = s
				}
			}
		}
		for k, v := range vals {
			var s projections.Summary
			if json.Unmarshal(v, &s) == nil {
				out[k[strings.LastIndexByte(k, '.')+1:]] = &s
			}
		}
		ids = ids[n:]
	}
	return out, nil
}

// Query is what Find looks for. Filters combine: a session matches when it
// matches each one given.
type Query struct {
	// Since and Until bound when the session was opened: Since <= opened <
	// Until; zero means unbounded.
	Since, Until time.Time
	// Tool matches sessions that called it; with Outcome, sessions where a
	// call of it ended with that outcome.
	Tool string
	// Outcome matches sessions with a result of that outcome (ok, error,
	// blocked, indeterminate).
	Outcome string
	// Limit is the page's size: DefaultSearchLimit when 0, at most
	// MaxSearchLimit.
	Limit int
	// Cursor continues a listing where the page that returned it ended.
	Cursor string
}

// Page is one page of Find's answer, newest first.
type Page struct {
	Sessions []*projections.Summary
	// Next continues the listing after this page; "" when it is the last.
	Next string
	// Scanned counts the markers and summaries the page read: what it
	// cost (docs/audit.md, "Finding sessions").
	Scanned int
}

// cursor is what a Page's Next encodes: the position of its last session
// (its day and id) and a digest of the filters it was made for.
type cursor struct {
	V       int    `json:"v"`
	Day     string `json:"d"`
	Session string `json:"s"`
	Filter  string `json:"f"`
}

func (q Query) fingerprint() string {
	b, _ := json.Marshal([]string{q.Since.UTC().Format(time.RFC3339Nano), q.Until.UTC().Format(time.RFC3339Nano), q.Tool, q.Outcome})
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:9])
}

var (
	dayRE = regexp.MustCompile(`^[0-9]{8}$`)
)

// EncodeCursor returns the opaque cursor for a position after (day,
// session) in a listing with q's filters.
func EncodeCursor(q Query, dayToken, session string) string {
	b, _ := json.Marshal(cursor{V: 1, Day: dayToken, Session: session, Filter: q.fingerprint()})
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor checks and decodes a cursor for q. Its error wraps
// ErrBadQuery and says what to do.
func DecodeCursor(q Query, s string) (dayToken, session string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var c cursor
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.V != 1 || !dayRE.MatchString(c.Day) || !events.ValidID(c.Session) {
		return "", "", fmt.Errorf("%w: cursor %q is not one this listing gave: pass back the \"next\" of the previous page unchanged", ErrBadQuery, truncate(s, 40))
	}
	if c.Filter != q.fingerprint() {
		return "", "", fmt.Errorf("%w: the cursor was given for other filters (since, until, tool, outcome): keep the filters of the first page, or start again without a cursor", ErrBadQuery)
	}
	return c.Day, c.Session, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// outcomes are the values Query.Outcome accepts.
var outcomes = []string{string(events.OutcomeOK), string(events.OutcomeError), string(events.OutcomeBlocked), string(events.OutcomeIndeterminate)}

// Check validates q, filling in its default limit. Its error wraps
// ErrBadQuery and names the field.
func (q *Query) Check() error {
	switch {
	case q.Outcome != "" && !slices.Contains(outcomes, q.Outcome):
		return fmt.Errorf("%w: outcome %q: use one of %s", ErrBadQuery, q.Outcome, strings.Join(outcomes, ", "))
	case q.Limit < 0 || q.Limit > MaxSearchLimit:
		return fmt.Errorf("%w: limit %d: use 1 to %d (default %d)", ErrBadQuery, q.Limit, MaxSearchLimit, DefaultSearchLimit)
	case !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until):
		return fmt.Errorf("%w: since %s is not before until %s", ErrBadQuery, q.Since.Format(time.RFC3339), q.Until.Format(time.RFC3339))
	case len(q.Tool) > 1024:
		return fmt.Errorf("%w: tool is %d bytes: a tool name is at most 1024", ErrBadQuery, len(q.Tool))
	}
	if q.Limit == 0 {
		q.Limit = DefaultSearchLimit
	}
	return nil
}

// Find answers q for tenant: the sessions opened in [Since, Until) that
// match its filters, newest first (by the day they were opened, then by
// id, which for the node's ULIDs is their time), one page of at most Limit,
// with the cursor of the next page. Errors wrap ErrBadQuery for a bad query,
// ErrInvalidID for a bad tenant.
func (x *Search) Find(ctx context.Context, tenant string, q Query) (Page, error) {
	if !events.ValidID(tenant) {
		return Page{}, fmt.Errorf("%w: tenant %q: use 1..128 letters, digits, '_' or '-'", ErrInvalidID, tenant)
	}
	if err := q.Check(); err != nil {
		return Page{}, err
	}
	var afterDay, afterID string
	if q.Cursor != "" {
		var err error
		if afterDay, afterID, err = DecodeCursor(q, q.Cursor); err != nil {
			return Page{}, err
		}
	}
	// The family of keys that answers the filters.
	dayFilter, sessionFilter := tenant+".d.*", func(d string) string { return tenant + ".s." + d + ".*" }
	switch {
	case q.Tool != "":
		o := q.Outcome
		if o == "" {
			o = projections.Called
		}
		tok := toolToken(q.Tool)
		dayFilter = tenant + ".md." + tok + "." + o + ".*"
		sessionFilter = func(d string) string { return tenant + ".m." + tok + "." + o + "." + d + ".*" }
	case q.Outcome != "":
		dayFilter = tenant + ".md.*." + q.Outcome + ".*"
		sessionFilter = func(d string) string { return tenant + ".m.*." + q.Outcome + "." + d + ".*" }
	}
	dayKeys, _, err := x.matching(ctx, dayFilter)
	if err != nil {
		return Page{}, err
	}
	page := Page{Scanned: len(dayKeys)}
	var days []string
	seen := map[string]bool{}
	for _, k := range dayKeys {
		d := k[strings.LastIndexByte(k, '.')+1:]
		if !dayRE.MatchString(d) || seen[d] {
			continue
		}
		seen[d] = true
		if (!q.Since.IsZero() && d < day(q.Since)) || (!q.Until.IsZero() && d > day(q.Until.Add(-time.Nanosecond))) || (afterDay != "" && d > afterDay) {
			continue
		}
		days = append(days, d)
	}
	slices.Sort(days)
	slices.Reverse(days)
	for _, d := range days {
		keys, vals, err := x.matching(ctx, sessionFilter(d))
		if err != nil {
			return Page{}, err
		}
		page.Scanned += len(keys)
		var ids []string
		seenID := map[string]bool{}
		for _, k := range keys {
			id := k[strings.LastIndexByte(k, '.')+1:]
			if (d == afterDay && id >= afterID) || seenID[id] { // an outcome of several tools: once
				continue
			}
			seenID[id] = true
			ids = append(ids, id)
		}
		slices.Sort(ids)
		slices.Reverse(ids)
		// The summaries: listed with the day's keys when the query has no
		// filter, else fetched for the day's candidates in bulk.
		sums := map[string]*projections.Summary{}
		fetched := 0 // ids[:fetched] were looked up (filtered queries)
		if q.Tool == "" && q.Outcome == "" && vals != nil {
			// Decoded as the page takes them (below): a day can hold
			// thousands.
		} else {
			// Only as many as the page can still take, and one more, unless
			// the time bounds may skip some.
			want := ids
			if q.Since.IsZero() && q.Until.IsZero() && len(want) > q.Limit-len(page.Sessions)+1 {
				want = want[:q.Limit-len(page.Sessions)+1]
			}
			if sums, err = x.summaries(ctx, tenant, d, want); err != nil {
				return Page{}, err
			}
			page.Scanned += len(want)
			fetched = len(want)
		}
		for i, id := range ids {
			s, ok := sums[id]
			if v, listed := vals[tenant+".s."+d+"."+id]; listed && q.Tool == "" && q.Outcome == "" {
				s = &projections.Summary{}
				ok = json.Unmarshal(v, s) == nil
			}
			if !ok && (q.Tool != "" || q.Outcome != "") && i >= fetched {
				// Past the candidates fetched (some were skipped): the rest.
				more, err := x.summaries(ctx, tenant, d, ids[i:])
				if err != nil {
					return Page{}, err
				}
				page.Scanned += len(ids) - i
				fetched = len(ids)
				for k, v := range more {
					sums[k] = v
				}
				s, ok = sums[id]
			}
			if !ok && q.Tool == "" && q.Outcome == "" && vals == nil {
				// The day's keys were listed without their values.
				var err error
				if s, _, ok, err = x.Stored(ctx, tenant, id, dayTime(d)); err != nil {
					return Page{}, err
				}
				page.Scanned++
			}
			if !ok || (!q.Since.IsZero() && s.Opened.Before(q.Since)) || (!q.Until.IsZero() && !s.Opened.Before(q.Until)) {
				continue // a marker filed before its summary, or outside the bounds
			}
			if len(page.Sessions) == q.Limit {
				last := page.Sessions[len(page.Sessions)-1]
				page.Next = EncodeCursor(q, day(last.Opened), last.Session)
				return page, nil
			}
			page.Sessions = append(page.Sessions, s)
		}
	}
	return page, nil
}

// dayTime is the start of a day token's day.
func dayTime(d string) time.Time {
	t, _ := time.Parse("20060102", d)
	return t
}

// Indexed returns, for every session the index holds, the Seq of the last
// event its summary folds, keyed "TENANT/SESSION": one pass over the
// summaries (a node compares it with the logs at start, and indexes again
// what is missing or behind).
func (x *Search) Indexed(ctx context.Context) (map[string]uint64, error) {
	w, err := x.kv.WatchFiltered(ctx, []string{"*.s.>"}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("search index: list summaries: %w", err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]uint64{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("search index: list summaries: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("search index: list summaries: the watcher closed")
			}
			if e == nil {
				return out, nil
			}
			var s struct {
				Tenant  string `json:"tenant"`
				Session string `json:"session"`
				Seq     uint64 `json:"seq"`
			}
			if json.Unmarshal(e.Value(), &s) == nil {
				out[s.Tenant+"/"+s.Session] = s.Seq
			}
		}
	}
}
