package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/replay"
	"github.com/callsheet/callsheet/signing"
)

// The audit side of replay: --verify's report, --export, --verify --file and
// --sign (docs/audit.md).

// report prints VerifyLog's problems, what the chain, the signatures and
// the checkpoints cover, and a summary line. cps are the checkpoints the
// source holds (looked says it was asked for them); those of --witness are
// added.
func (m *Main) report(evs []events.Event, cps []replay.Checkpoint, looked bool) error {
	keys, err := m.keys()
	if err != nil {
		return err
	}
	if m.Witness != "" {
		w, err := readWitness(m.Witness)
		if err != nil {
			return err
		}
		cps, looked = append(cps, w...), true
	}
	r := replay.VerifyLog(m.Tenant, m.Session, evs, replay.VerifyOptions{Keys: keys, RequireChain: m.RequireChain, Checkpoints: cps})
	for _, p := range r.Problems {
		fmt.Fprintln(m.Stdout, p)
	}
	fmt.Fprintln(m.Stdout, chainLine(r))
	if line := signatureLine(r, len(keys) > 0); line != "" {
		fmt.Fprintln(m.Stdout, line)
	}
	if line := checkpointLine(r, looked); line != "" {
		fmt.Fprintln(m.Stdout, line)
	}
	problems := 0
	for _, p := range r.Problems {
		if !p.Warning {
			problems++
		}
	}
	if problems == 0 {
		fmt.Fprintf(m.Stdout, "verified %d events of session %s (tenant %s): ok, %d warnings\n", len(evs), m.Session, m.Tenant, len(r.Problems))
		return nil
	}
	fmt.Fprintf(m.Stdout, "verified %d events of session %s (tenant %s): %d problems, %d warnings\n", len(evs), m.Session, m.Tenant, problems, len(r.Problems)-problems)
	return ErrVerifyFailed
}

// chainLine says what the hash chain covers.
func chainLine(r replay.Report) string {
	head := fmt.Sprintf("head seq %d, hash %s", r.HeadSeq, r.Head)
	switch {
	case r.Unchained == r.Events:
		return "chain: none: the log is unchained (written before the hash chain); " + head
	case r.Unchained > 0:
		return fmt.Sprintf("chain: from the %d-th of %d events on (the first %d are unchained), linked by %s; %s", r.Unchained+1, r.Events, r.Unchained, r.Chain, head)
	}
	return fmt.Sprintf("chain: all %d events, linked by %s; %s", r.Events, r.Chain, head)
}

// signatureLine says what the signatures cover, or "" when there are none
// and none were asked for.
func signatureLine(r replay.Report, checked bool) string {
	switch {
	case r.Signatures == 0 && !checked:
		return "signatures: none (a node signs a session's head when it closes, and on POST /v1/sessions/{s}/sign)"
	case !checked:
		return fmt.Sprintf("signatures: %d, not checked: give the node's public key with --pubkey", r.Signatures)
	case r.Signed == 0:
		return fmt.Sprintf("signatures: %d, none verifies with the given key", r.Signatures)
	}
	complete := ""
	if r.SignedReason == events.SignClosed && r.Closed {
		complete = "; signed when the session closed, so the log is complete"
	}
	return fmt.Sprintf("signatures: %d; the events up to seq %d are signed with the given key (%s)%s", r.Signatures, r.Signed, r.SignedReason, complete)
}

// keys loads the --pubkey files.
func (m *Main) keys() ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for _, p := range m.PublicKeys {
		k, err := signing.LoadPublicKey(p)
		if err != nil {
			return nil, fmt.Errorf("--pubkey: %w", err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// verifyFile checks an export (--verify --file): the session and tenant are
// the export's own, or must be --session's and --tenant's when given.
func (m *Main) verifyFile() error {
	f, err := os.Open(m.File)
	if err != nil {
		return fmt.Errorf("--file: %w", err)
	}
	defer f.Close()
	evs, err := readExport(f)
	if err != nil {
		return fmt.Errorf("--file %s: %w", m.File, err)
	}
	if m.Session == "" {
		m.Session = evs[0].Session
	}
	if !m.tenantSet {
		m.Tenant = evs[0].Tenant
	}
	return m.report(evs, nil, false)
}

// maxExport bounds an export read by --verify --file (a session's whole log).
const maxExport = 4 << 30

// readExport reads an export: NDJSON, one event per line, each with the
// envelope events.Unmarshal requires. Blank lines are skipped; anything else
// is an error naming the line. It reads at most maxExport bytes.
func readExport(r io.Reader) ([]events.Event, error) {
	evs, err := decodeEvents(io.LimitReader(r, maxExport+1))
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("no events: an export holds one event per line (" + Program + " --export)")
	}
	return evs, nil
}

// export writes the events as NDJSON: each exactly as events.Marshal stores
// it (the hash link included, a payload stored by reference resolved), then
// says on Stderr what the export's signatures cover.
func (m *Main) export(evs []events.Event) error {
	w := bufio.NewWriter(m.Stdout)
	for _, ev := range evs {
		b, err := events.Marshal(ev)
		if err != nil {
			return fmt.Errorf("export seq %d: %w", ev.Seq, err)
		}
		w.Write(b)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		return err
	}
	r := replay.VerifyLog(m.Tenant, m.Session, evs, replay.VerifyOptions{})
	note := "the head is not signed: a change to the last event would not show; sign it first (" + Program + " --url ... --export --sign, or POST /v1/sessions/{s}/sign)"
	if last := evs[len(evs)-1]; last.Type == events.TypeHeadSigned {
		note = "the head is signed: check it with " + Program + " --verify --file FILE --pubkey " + m.publicKeyHint()
	}
	fmt.Fprintf(m.Stderr, "exported %d events of session %s (tenant %s); %s; %s\n", len(evs), m.Session, m.Tenant, chainLine(r), note)
	return nil
}

// publicKeyHint names the public key an export is checked with: the data
// directory's own when replay read one, else where a node keeps it.
func (m *Main) publicKeyHint() string {
	if m.NATSURL == "" && m.URL == "" {
		return signing.PublicKeyPath(signing.DefaultKeyPath(m.DataDir))
	}
	return "DATA/credentials/signing.pub (the node's public key)"
}

// sign asks the node to sign the session's head (--sign), and says so on
// Stderr.
func (m *Main) sign(ctx context.Context, s *apiSource) error {
	u := s.base.String() + "/v1/sessions/" + url.PathEscape(m.Session) + "/sign"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader([]byte("{}")))
	if err != nil {
		return err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %d %s", u, resp.StatusCode, bytes.TrimSpace(b))
	}
	var a struct {
		Seq    uint64            `json:"seq"`
		Signed events.HeadSigned `json:"signed"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("POST %s: undecodable answer: %w", u, err)
	}
	fmt.Fprintf(m.Stderr, "signed: seq %d (hash %s) with key %s, recorded at seq %d\n", a.Signed.Seq, a.Signed.Hash, a.Signed.Key, a.Seq)
	return nil
}
