package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
)

// Deleting sessions and the deletions log (docs/spec.md §10, §11).

// DeleteAnswer is the answer of DELETE /v1/sessions/{s}: the receipt
// recorded in the tenant's deletions log, what was removed from each store,
// and the node's public key (check its id against the key you got from the
// operator).
type DeleteAnswer struct {
	Session   string          `json:"session"`
	Receipt   json.RawMessage `json:"receipt"`
	Finished  bool            `json:"finished,omitempty"`
	Removed   node.Removed    `json:"removed"`
	PublicKey string          `json:"public_key"`
}

// deleteSession deletes the session (the owner does: the route is
// routed), recording the authenticated principal as who asked.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, tenant string) error {
	del, err := s.node.DeleteSession(r.Context(), tenant, r.PathValue("s"), principal(r), events.DeletedOnRequest)
	if err != nil {
		return err
	}
	pub, _ := s.node.SigningKey()
	writeJSON(w, http.StatusOK, DeleteAnswer{Session: r.PathValue("s"), Receipt: del.Receipt, Finished: del.Finished, Removed: del.Removed,
		PublicKey: base64.StdEncoding.EncodeToString(pub)})
	return nil
}

// DeletionsPage is the answer of GET /v1/deletions: the tenant's receipts
// in its deletions log's order, each as stored (canonical JSON: its
// SHA-256 is the next receipt's prev), and the position to ask after for
// the next page.
type DeletionsPage struct {
	Tenant    string            `json:"tenant"`
	Deletions []json.RawMessage `json:"deletions"`
	Next      uint64            `json:"next,omitempty"`
	PublicKey string            `json:"public_key"`
}

// Limits of GET /v1/deletions.
const (
	// DefaultDeletionsLimit is a page's size when the query gives none.
	DefaultDeletionsLimit = 1000
	// MaxDeletionsLimit is the largest page.
	MaxDeletionsLimit = 10_000
)

// deletionParams are the query parameters GET /v1/deletions takes.
var deletionParams = []string{"after", "limit"}

func (s *Server) listDeletions(w http.ResponseWriter, r *http.Request, tenant string) error {
	q := r.URL.Query()
	for name, vs := range q {
		if !slices.Contains(deletionParams, name) || len(vs) > 1 {
			return errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("query parameter %q: give after (the receipts to skip, from a page's next) and limit (1 to %d) at most once each", name, MaxDeletionsLimit))
		}
	}
	var after uint64
	limit := DefaultDeletionsLimit
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("after=%q: use a whole number (a page's next)", v))
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxDeletionsLimit {
			return errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("limit=%q: use a whole number from 1 to %d", v, MaxDeletionsLimit))
		}
		limit = n
	}
	list, err := s.node.Deletions(r.Context(), tenant, after, limit+1)
	if err != nil {
		return err
	}
	pub, _ := s.node.SigningKey()
	page := DeletionsPage{Tenant: tenant, Deletions: []json.RawMessage{}, PublicKey: base64.StdEncoding.EncodeToString(pub)}
	for i, d := range list {
		if i == limit {
			page.Next = after + uint64(limit)
			break
		}
		page.Deletions = append(page.Deletions, json.RawMessage(strings.TrimSpace(string(d.Data))))
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}
