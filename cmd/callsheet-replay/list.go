package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/api"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// listQuery is --list's filters as GET /v1/sessions takes them.
func (m *Main) listQuery() url.Values {
	v := url.Values{}
	for name, val := range map[string]string{"since": m.Since, "until": m.Until, "tool": m.Tool, "outcome": m.Outcome, "limit": m.Limit, "cursor": m.Cursor} {
		if val != "" {
			v.Set(name, val)
		}
	}
	return v
}

// list prints the sessions that match --list's filters, newest first: from
// the search index in the store (--data, --nats), or through the API
// (--url), the same page either way.
func (m *Main) list(ctx context.Context) error {
	v := m.listQuery()
	q, err := api.ParseSessionQuery(v)
	if err != nil {
		return fmt.Errorf("--list: %w", err)
	}
	var out api.SessionList
	if m.URL != "" {
		s, err := newAPISource(m.URL, m.Token)
		if err != nil {
			return err
		}
		resp, err := s.get(ctx, "/v1/sessions?"+v.Encode(), "application/json")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&out); err != nil {
			return fmt.Errorf("the sessions from %s: %w", m.URL, err)
		}
	} else {
		nc, closeStore, err := m.open()
		if err != nil {
			return err
		}
		defer closeStore()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		if err := m.storeTenant(ctx, js); err != nil {
			return err
		}
		x, err := natslog.OpenSearch(ctx, js)
		if err != nil {
			return err
		}
		page, err := x.Find(ctx, m.Tenant, q)
		if err != nil {
			return err
		}
		out = api.SessionList{Tenant: m.Tenant, Sessions: make([]api.SessionItem, 0, len(page.Sessions)), Next: page.Next}
		for _, s := range page.Sessions {
			out.Sessions = append(out.Sessions, api.ItemOf(s))
		}
	}
	if m.Format == FormatJSON {
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		_, err = m.Stdout.Write(append(b, '\n'))
		return err
	}
	return m.printList(out)
}

// printList writes a page as a table, after the tenant listed, with how to
// get the next page.
func (m *Main) printList(l api.SessionList) error {
	fmt.Fprintf(m.Stdout, "sessions of tenant %s\n", l.Tenant)
	w := tabwriter.NewWriter(m.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(w, "SESSION\tOPENED\tTURNS\tCALLS\tOUTCOMES\tTOOLS\tSTATE")
	for _, s := range l.Sessions {
		var oc []string
		for _, o := range []events.Outcome{events.OutcomeOK, events.OutcomeError, events.OutcomeBlocked, events.OutcomeIndeterminate} {
			if n := s.Outcomes[o]; n > 0 {
				oc = append(oc, fmt.Sprintf("%d %s", n, o))
			}
		}
		state := "open"
		if s.Closed {
			state = "closed"
		}
		if s.Signed > 0 {
			state += fmt.Sprintf(", signed at %d", s.Signed)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Session, s.Opened.UTC().Format(time.RFC3339), s.Turns, s.Calls,
			dash(strings.Join(oc, ", ")), dash(strings.Join(s.Tools, " ")), state)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(l.Sessions) == 0 {
		fmt.Fprintln(m.Stdout, "no sessions match")
	}
	if l.Next != "" {
		fmt.Fprintf(m.Stdout, "more: add --cursor %s\n", l.Next)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
