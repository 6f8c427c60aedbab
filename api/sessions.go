package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
)

// SessionItem is one session as GET /v1/sessions lists it: from the search
// index, kept as the log is written (docs/audit.md, "Finding sessions").
type SessionItem struct {
	Session string `json:"session"`
	// Opened is when the session was opened (its SessionOpened).
	Opened    time.Time `json:"opened"`
	Workspace string    `json:"workspace,omitempty"`
	Agent     string    `json:"agent,omitempty"`
	Turns     int       `json:"turns"`
	Calls     int       `json:"calls"`
	// Outcomes counts the committed results by outcome (only outcomes that
	// occur are listed).
	Outcomes map[events.Outcome]int `json:"outcomes"`
	// Tools are the tools the session's calls named, sorted.
	Tools []string `json:"tools"`
	// Events is the number of events; LastEvent the time of the last.
	Events    uint64    `json:"events"`
	LastEvent time.Time `json:"last_event"`
	Closed    bool      `json:"closed"`
	// Signed is the seq of the latest signed head, when one is signed.
	Signed uint64 `json:"signed,omitempty"`
}

// SessionList is the answer of GET /v1/sessions: the tenant listed, one
// page of its sessions, newest first, and the cursor of the next page (""
// when it is the last).
type SessionList struct {
	Tenant   string        `json:"tenant"`
	Sessions []SessionItem `json:"sessions"`
	Next     string        `json:"next,omitempty"`
}

// ItemOf is the list item of a session's summary.
func ItemOf(s *projections.Summary) SessionItem {
	return SessionItem{Session: s.Session, Opened: s.Opened, Workspace: s.Workspace, Agent: s.Agent, Turns: s.Turns, Calls: s.Calls,
		Outcomes: s.Outcomes, Tools: s.Tools, Events: s.Seq, LastEvent: s.Last, Closed: s.Closed, Signed: s.Signed}
}

// sessionParams are the query parameters GET /v1/sessions takes.
var sessionParams = []string{"since", "until", "tool", "outcome", "limit", "cursor"}

// ParseSessionQuery reads the query of GET /v1/sessions: since and until
// (RFC 3339, or a date YYYY-MM-DD meaning its start, UTC), tool, outcome,
// limit and cursor. A parameter it does not know, one given twice, or a
// value it cannot read is an error naming it and what to send.
func ParseSessionQuery(v url.Values) (node.SessionQuery, error) {
	var q node.SessionQuery
	for name, vs := range v {
		if !slices.Contains(sessionParams, name) {
			return q, fmt.Errorf("query parameter %q is not known: use %s", name, strings.Join(sessionParams, ", "))
		}
		if len(vs) > 1 {
			return q, fmt.Errorf("query parameter %s is given %d times: give it once (filters combine across parameters)", name, len(vs))
		}
	}
	var err error
	if q.Since, err = timeParam(v, "since"); err != nil {
		return q, err
	}
	if q.Until, err = timeParam(v, "until"); err != nil {
		return q, err
	}
	q.Tool, q.Outcome, q.Cursor = v.Get("tool"), v.Get("outcome"), v.Get("cursor")
	if s := v.Get("limit"); s != "" {
		if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 1 {
			return q, fmt.Errorf("limit=%q: use a whole number from 1 to %d", s, node.MaxSessionLimit)
		}
	}
	if err := q.Check(); err != nil {
		return q, err
	}
	return q, nil
}

func timeParam(v url.Values, name string) (time.Time, error) {
	s := v.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%s=%q: use RFC 3339 (2026-12-01T09:00:00Z) or a date (2026-12-01, its start in UTC)", name, s)
}

// listSessions answers GET /v1/sessions for the token's tenant.
func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, tenant string) error {
	q, err := ParseSessionQuery(r.URL.Query())
	if err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidRequest, err.Error())
	}
	page, err := s.node.ListSessions(r.Context(), tenant, q)
	if err != nil {
		return err
	}
	out := SessionList{Tenant: tenant, Sessions: make([]SessionItem, 0, len(page.Sessions)), Next: page.Next}
	for _, sum := range page.Sessions {
		out.Sessions = append(out.Sessions, ItemOf(sum))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
