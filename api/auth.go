package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"

	"github.com/callsheet/callsheet/config"
)

// authenticator maps bearer tokens to tenants. Tokens are kept as SHA-256
// digests and compared in constant time against every tenant, so neither the
// comparison nor its length reveals a token.
type authenticator struct {
	// tenants is nil when the node serves only config.DefaultTenant.
	tenants []tenantToken
}

type tenantToken struct {
	name   string
	digest [sha256.Size]byte
}

func newAuthenticator(tenants map[string]config.Tenant) authenticator {
	var a authenticator
	for name, t := range tenants {
		a.tenants = append(a.tenants, tenantToken{name: name, digest: sha256.Sum256([]byte(t.Token))})
	}
	slices.SortFunc(a.tenants, func(x, y tenantToken) int { return strings.Compare(x.name, y.name) })
	return a
}

// tenant returns the tenant r acts for: config.DefaultTenant without
// tenants, else the one whose token r's Authorization header bears. An
// absent or unknown token is a 401 *Error.
func (a authenticator) tenant(r *http.Request) (string, error) {
	if a.tenants == nil {
		return config.DefaultTenant, nil
	}
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", errorf(http.StatusUnauthorized, CodeUnauthorized, `this node serves several tenants: send "Authorization: Bearer <token>" with your tenant's token`)
	}
	digest := sha256.Sum256([]byte(strings.TrimSpace(token)))
	found := ""
	for _, t := range a.tenants {
		// Compare with every tenant, never stopping early.
		if subtle.ConstantTimeCompare(digest[:], t.digest[:]) == 1 {
			found = t.name
		}
	}
	if found == "" {
		return "", errorf(http.StatusUnauthorized, CodeUnauthorized, "the bearer token matches no tenant of this node")
	}
	return found, nil
}
