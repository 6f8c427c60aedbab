package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/api"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/replay"
)

// The deletions log (docs/audit.md, "Deletion receipts"): --deletions
// prints a tenant's receipts, --export writes them as stored (NDJSON),
// --verify checks their chain and, with --pubkey, their signatures; from
// the store (--data, --nats), through the API (--url), or, with --verify
// --file, from an export away from the fleet.

// deletionsPage bounds each read of the log through the API.
const deletionsPage = api.MaxDeletionsLimit

// deletions runs --deletions.
func (m *Main) deletions(ctx context.Context) error {
	var receipts [][]byte
	if m.File != "" {
		b, err := readLines(m.File)
		if err != nil {
			return err
		}
		receipts = b
		if !m.tenantSet && len(receipts) > 0 {
			// The export names its tenant in every receipt; the chain's
			// genesis link checks that it is the tenant's whole log.
			if d, err := events.ParseDeletion(receipts[0]); err == nil {
				m.Tenant = d.Tenant
			}
		}
	} else if m.URL != "" {
		s, err := newAPISource(m.URL, m.Token)
		if err != nil {
			return err
		}
		if receipts, m.Tenant, err = s.deletions(ctx); err != nil {
			return err
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
		d, err := natslog.OpenDeletions(ctx, js)
		if errors.Is(err, natslog.ErrNoDeletions) {
			d = nil // a store from before the deletions log: no receipts
		} else if err != nil {
			return err
		}
		if d != nil {
			list, err := d.List(ctx, m.Tenant, 0, int(^uint(0)>>1))
			if err != nil {
				return err
			}
			for _, s := range list {
				receipts = append(receipts, s.Data)
			}
		}
	}
	switch {
	case m.Export:
		for _, r := range receipts {
			if _, err := m.Stdout.Write(append(bytes.TrimSpace(r), '\n')); err != nil {
				return err
			}
		}
		fmt.Fprintf(m.Stderr, "exported the deletions log of tenant %s: %d receipts\n", m.Tenant, len(receipts))
		return nil
	case m.Verify:
		keys, err := m.keys()
		if err != nil {
			return err
		}
		r := replay.VerifyDeletions(m.Tenant, receipts, keys)
		for _, p := range r.Problems {
			fmt.Fprintln(m.Stdout, p)
		}
		if r.Head != "" {
			fmt.Fprintf(m.Stdout, "chain: %d receipts; head %s\n", r.Receipts, r.Head)
		} else {
			fmt.Fprintln(m.Stdout, "chain: no receipts")
		}
		if len(keys) == 0 {
			fmt.Fprintf(m.Stdout, "signatures: %d, not checked (give --pubkey)\n", r.Receipts)
		} else {
			fmt.Fprintf(m.Stdout, "signatures: %d of %d verify with the given keys\n", r.Signed, r.Receipts)
		}
		if !r.OK() {
			fmt.Fprintf(m.Stdout, "the deletions log of tenant %s failed: %d problems\n", m.Tenant, len(r.Problems))
			return ErrVerifyFailed
		}
		fmt.Fprintf(m.Stdout, "verified the deletions log of tenant %s: %d receipts, ok\n", m.Tenant, r.Receipts)
		return nil
	case m.Format == FormatJSON:
		page := api.DeletionsPage{Tenant: m.Tenant, Deletions: []json.RawMessage{}}
		for _, r := range receipts {
			page.Deletions = append(page.Deletions, json.RawMessage(bytes.TrimSpace(r)))
		}
		b, err := json.Marshal(page)
		if err != nil {
			return err
		}
		_, err = m.Stdout.Write(append(b, '\n'))
		return err
	}
	return m.printDeletions(receipts)
}

// printDeletions writes the receipts as a table, after the tenant whose
// log it is.
func (m *Main) printDeletions(receipts [][]byte) error {
	fmt.Fprintf(m.Stdout, "deletions log of tenant %s: %d receipts\n", m.Tenant, len(receipts))
	w := tabwriter.NewWriter(m.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(w, "N\tDELETED\tSESSION\tBY\tREASON\tLAST EVENT\tNODE")
	for i, b := range receipts {
		d, err := events.ParseDeletion(b)
		if err != nil {
			fmt.Fprintf(w, "%d\t-\t-\t-\t-\t%v\t-\n", i+1, err)
			continue
		}
		last := "-"
		if d.LastSeq > 0 {
			last = fmt.Sprintf("seq %d, %s…", d.LastSeq, d.LastHash[:16])
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", d.N, d.Deleted.UTC().Format(time.RFC3339), d.Session, d.By, d.Reason, last, dash(d.Node))
	}
	return w.Flush()
}

// deletions reads the token's tenant's whole deletions log through GET
// /v1/deletions, page by page, and names the tenant.
func (s *apiSource) deletions(ctx context.Context) ([][]byte, string, error) {
	var out [][]byte
	tenant := ""
	for after := uint64(0); ; {
		v := url.Values{"after": {strconv.FormatUint(after, 10)}, "limit": {strconv.Itoa(deletionsPage)}}
		resp, err := s.get(ctx, "/v1/deletions?"+v.Encode(), "application/json")
		if err != nil {
			return nil, "", err
		}
		var page api.DeletionsPage
		err = json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return nil, "", fmt.Errorf("the deletions log from %s: %w", s.base, err)
		}
		tenant = page.Tenant
		for _, r := range page.Deletions {
			out = append(out, []byte(r))
		}
		if page.Next == 0 {
			return out, tenant, nil
		}
		after = page.Next
	}
}

// readLines reads an NDJSON file's non-empty lines.
func readLines(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	var out [][]byte
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			out = append(out, bytes.Clone(line))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--file %s: %w", path, err)
	}
	return out, nil
}

// storeTenant settles which tenant a store read is for: --tenant when
// given; else the store's only tenant (config.DefaultTenant for a store
// without sessions), said on stderr; a store holding several tenants needs
// --tenant, and the error names them. Nothing is read for a tenant by
// default without saying so.
func (m *Main) storeTenant(ctx context.Context, js jetstream.JetStream) error {
	if m.tenantSet {
		return nil
	}
	tenants, err := storeTenants(ctx, js)
	if err != nil {
		return err
	}
	switch len(tenants) {
	case 0:
		m.Tenant = config.DefaultTenant
	case 1:
		m.Tenant = tenants[0]
	default:
		return fmt.Errorf("the store holds the sessions of %d tenants (%s): give --tenant", len(tenants), strings.Join(tenants, ", "))
	}
	fmt.Fprintf(m.Stderr, "tenant %s (the store's only tenant; --tenant names another)\n", m.Tenant)
	return nil
}

// storeTenants lists the tenants a store holds sessions or receipts of,
// from the session index's keys and the deletions log's subjects.
func storeTenants(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	seen := map[string]bool{}
	if kv, err := js.KeyValue(ctx, natslog.DefaultIndexBucket); err == nil {
		l, err := kv.ListKeys(ctx)
		if err != nil {
			return nil, err
		}
		for k := range l.Keys() {
			if t, _, ok := strings.Cut(k, "."); ok {
				seen[t] = true
			}
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	if st, err := js.Stream(ctx, natslog.DefaultDeletionsStream); err == nil {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(natslog.DeletionsSubject("*", "*")))
		if err != nil {
			return nil, err
		}
		for subj := range info.State.Subjects {
			if parts := strings.Split(subj, "."); len(parts) == 4 {
				seen[parts[2]] = true
			}
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}
