package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/node"
)

// LocalPrincipal is the principal of every request to a node without
// tenants: it serves config.DefaultTenant on loopback without tokens, so
// nothing names the caller, and the log records this fixed name rather than
// one the request claims (docs/permissions.md, "Who decided").
const LocalPrincipal = "local"

// errRevoked ends the requests of a token that was removed from the
// tenants (or whose tenant, principal or scopes changed) while they ran.
var errRevoked = errors.New("api: the token was removed from the node's tenants while the request ran")

// identity is who a request acts as: its tenant, and the principal its
// token names (the decider recorded for its approvals, docs/spec.md §10
// "Provenance").
type identity struct {
	tenant    string
	principal string
	// scopes are what the token may do (docs/spec.md §10).
	scopes scopeSet
	// revoked ends when the token stops being what it was (removed, or
	// given another tenant, principal or scopes); never for a node without
	// tenants.
	revoked context.Context
}

// authenticator maps bearer tokens to tenants, principals and scopes, for
// one table of tenants. Tokens are kept as SHA-256 digests and compared in
// constant time against every token, so neither the comparison nor its
// length reveals a token.
type authenticator struct {
	// local: the node serves only config.DefaultTenant, to anyone.
	local  bool
	tokens []tokenDigest
}

type tokenDigest struct {
	identity
	digest [sha256.Size]byte
	revoke context.CancelCauseFunc
}

// newAuthenticator builds the table of ts. A token that prev (the table
// before, or nil) holds with the same identity keeps its revocation
// context; every token of prev that is gone or changed has its context
// ended, so its requests still running end too.
func newAuthenticator(ts *node.Tenants, prev *authenticator) *authenticator {
	a := &authenticator{local: !ts.Multi}
	old := map[[sha256.Size]byte]tokenDigest{}
	if prev != nil {
		for _, t := range prev.tokens {
			old[t.digest] = t
		}
	}
	for name, t := range ts.Tenants {
		for _, tok := range t.Principals(name) {
			digest, ok := tok.Digest()
			if !ok {
				continue // refused by config; never matches
			}
			id := identity{tenant: name, principal: tok.Principal, scopes: scopesOf(tok.Scopes)}
			td := tokenDigest{identity: id, digest: digest}
			if o, ok := old[digest]; ok && o.tenant == id.tenant && o.principal == id.principal && o.scopes == id.scopes {
				td.revoked, td.revoke = o.revoked, o.revoke
				delete(old, digest)
			} else {
				td.revoked, td.revoke = context.WithCancelCause(context.Background())
			}
			a.tokens = append(a.tokens, td)
		}
	}
	for _, o := range old {
		o.revoke(errRevoked)
	}
	slices.SortFunc(a.tokens, func(x, y tokenDigest) int {
		return strings.Compare(x.tenant+"\x00"+x.principal, y.tenant+"\x00"+y.principal)
	})
	return a
}

// identify returns who r acts as: config.DefaultTenant and LocalPrincipal
// with every scope without tenants, else the tenant, principal and scopes
// of the token r's Authorization header bears. An absent or unknown token
// is a 401 *Error.
func (a *authenticator) identify(r *http.Request) (identity, error) {
	if a.local {
		return identity{tenant: config.DefaultTenant, principal: LocalPrincipal, scopes: allScopes, revoked: context.Background()}, nil
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

// authTable keeps the authenticator of the tenants in force: the node's table
// can change at any time (a tenants_file rewritten), and the next request
// is checked against the new one. Safe for concurrent use.
type authTable struct {
	node interface{ Tenants() *node.Tenants }
	mu   sync.Mutex // one rebuild at a time
	cur  atomic.Pointer[authFor]
}

// authFor is an authenticator and the table it was built from.
type authFor struct {
	ts *node.Tenants
	a  *authenticator
}

// current returns the authenticator of the node's tenants now, building it
// when they changed.
func (x *authTable) current() *authenticator {
	ts := x.node.Tenants()
	if c := x.cur.Load(); c != nil && c.ts == ts {
		return c.a
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	c := x.cur.Load()
	if c != nil && c.ts == ts {
		return c.a
	}
	var prev *authenticator
	if c != nil {
		prev = c.a
	}
	a := newAuthenticator(ts, prev)
	x.cur.Store(&authFor{ts: ts, a: a})
	return a
}

// identify is the current authenticator's identify.
func (x *authTable) identify(r *http.Request) (identity, error) { return x.current().identify(r) }

// revocable returns r with a context that ends, with errRevoked as its
// cause, when id's token is revoked, and the func that releases it.
func revocable(r *http.Request, id identity) (*http.Request, func()) {
	if id.revoked == nil || id.revoked.Done() == nil {
		return r, func() {}
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	stop := context.AfterFunc(id.revoked, func() { cancel(context.Cause(id.revoked)) })
	return r.WithContext(ctx), func() { stop(); cancel(nil) }
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
