package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"

	"github.com/callsheet/callsheet/config"
)

// LocalPrincipal is the principal of every request to a node without
// tenants: it serves config.DefaultTenant on loopback without tokens, so
// nothing names the caller, and the log records this fixed name rather than
// one the request claims (docs/permissions.md, "Who decided").
const LocalPrincipal = "local"

// identity is who a request acts as: its tenant, and the principal its
// token names (the decider recorded for its approvals, docs/spec.md §10
// "Provenance").
type identity struct {
	tenant    string
	principal string
}

// authenticator maps bearer tokens to tenants and principals. Tokens are
// kept as SHA-256 digests and compared in constant time against every token,
// so neither the comparison nor its length reveals a token.
type authenticator struct {
	// tokens is nil when the node serves only config.DefaultTenant.
	tokens []tokenDigest
}

type tokenDigest struct {
	identity
	digest [sha256.Size]byte
}

func newAuthenticator(tenants map[string]config.Tenant) authenticator {
	var a authenticator
	for name, t := range tenants {
		for _, tok := range t.Principals(name) {
			a.tokens = append(a.tokens, tokenDigest{identity: identity{tenant: name, principal: tok.Principal}, digest: sha256.Sum256([]byte(tok.Token))})
		}
	}
	slices.SortFunc(a.tokens, func(x, y tokenDigest) int {
		return strings.Compare(x.tenant+"\x00"+x.principal, y.tenant+"\x00"+y.principal)
	})
	return a
}

// identify returns who r acts as: config.DefaultTenant and LocalPrincipal
// without tenants, else the tenant and principal of the token r's
// Authorization header bears. An absent or unknown token is a 401 *Error.
func (a authenticator) identify(r *http.Request) (identity, error) {
	if a.tokens == nil {
		return identity{tenant: config.DefaultTenant, principal: LocalPrincipal}, nil
	}
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return identity{}, errorf(http.StatusUnauthorized, CodeUnauthorized, `this node serves several tenants: send "Authorization: Bearer <token>" with your tenant's token`)
	}
	digest := sha256.Sum256([]byte(strings.TrimSpace(token)))
	var found identity
	for _, t := range a.tokens {
		// Compare with every token, never stopping early.
		if subtle.ConstantTimeCompare(digest[:], t.digest[:]) == 1 {
			found = t.identity
		}
	}
	if found.tenant == "" {
		return identity{}, errorf(http.StatusUnauthorized, CodeUnauthorized, "the bearer token matches no tenant of this node")
	}
	return found, nil
}

// identify is the authenticator's identify, logging each refusal: the
// route, the method, the peer and why (no token, or one that matches no
// tenant), never the token or the Authorization header.
func (s *Server) identify(r *http.Request) (identity, error) {
	id, err := s.auth.identify(r)
	if err != nil {
		reason := "no bearer token"
		if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(token) != "" {
			reason = "the token matches no tenant"
		}
		route := r.Pattern
		if route == "" {
			route = r.URL.Path // /mcp, which the SDK routes
		}
		s.log.Warn("authentication failed", "route", route, "method", r.Method, "remote", r.RemoteAddr, "reason", reason)
	}
	return id, err
}

type identityKey struct{}

// withIdentity returns r carrying id, for handlers that record who acted.
func withIdentity(r *http.Request, id identity) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), identityKey{}, id))
}

// principal returns the authenticated principal r carries (set by handle
// before any handler runs). Only this, never a body field or header, names
// who decided an approval or answered a question.
func principal(r *http.Request) string {
	id, _ := r.Context().Value(identityKey{}).(identity)
	return id.principal
}
