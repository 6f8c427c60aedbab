package api

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// guard is the first check of every request, on every route (/mcp and
// /healthz included), before authentication: the one place that decides
// which requests a browser could have been made to send.
//
//   - Host: a node without tenants answers loopback names only
//     (localhost, loopback addresses); a node with tenants answers those,
//     any IP address, and the names of http.allowed_hosts. DNS rebinding
//     needs a name the attacker controls, which is never on the list.
//   - Peer: a node without tenants answers loopback peers only, whatever
//     it listens on.
//   - Cross-site: a browser request from a page of another origin
//     (Sec-Fetch-Site cross-site or same-site, or an Origin that is not the
//     request's own) is refused, except a plain navigation (a link
//     followed), which cannot read the answer.
//
// It is pure data, safe for concurrent use.
type guard struct {
	// local: the node has no tenants, so whoever reaches it is trusted.
	local bool
	// allowed are the http.allowed_hosts entries (checked by config).
	allowed []string
}

// check returns the *Error refusing r, or nil.
func (g guard) check(r *http.Request) *Error {
	if why := g.hostRefusal(r.Host); why != "" {
		return errorf(http.StatusForbidden, CodeForbidden, why)
	}
	if g.local {
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err != nil || !ap.Addr().Unmap().IsLoopback() {
			return errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("this node has no tenants, so it serves loopback (this machine) only, and the request came from %s: configure \"tenants\" with bearer tokens to serve other machines", r.RemoteAddr))
		}
	}
	if why := crossSite(r); why != "" {
		return errorf(http.StatusForbidden, CodeForbidden, why)
	}
	return nil
}

// hostRefusal says why the API does not answer a request for host (the
// Host header, with or without a port), or "" when it does.
func (g guard) hostRefusal(hostport string) string {
	if hostport == "" {
		return "the request has no Host header: send the host you reach the node by"
	}
	host, port := splitHost(hostport)
	if loopbackName(host) {
		return ""
	}
	if g.local {
		return fmt.Sprintf("the Host %q is not a loopback name: a node without tenants answers only localhost, 127.0.0.1 and [::1] (a page whose name was made to lead here, by DNS rebinding, must reach nothing); reach it as http://127.0.0.1:PORT", hostport)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return "" // an address: no name an attacker could make lead here
	}
	for _, a := range g.allowed {
		if hostMatches(a, host, port) {
			return ""
		}
	}
	return fmt.Sprintf("the Host %q is not one this node answers to: reach it by an IP address or a loopback name, or ask the operator to add the name to http.allowed_hosts", hostport)
}

// splitHost splits a Host header into its host, lower-cased without a
// final dot or IPv6 brackets, and its port ("" when absent).
func splitHost(hostport string) (host, port string) {
	host = hostport
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	return host, port
}

// loopbackName reports whether host (from splitHost) names this machine's
// loopback: "localhost" or a loopback address.
func loopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// hostMatches reports whether an http.allowed_hosts entry admits host and
// port: the same host, or a subdomain of a "*." entry, and the entry's port
// when it names one.
func hostMatches(entry, host, port string) bool {
	h, p := splitHost(entry)
	if p != "" && p != port {
		return false
	}
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		return strings.HasSuffix(host, "."+rest)
	}
	return h == host
}

// crossSite says why r, as a browser sent it, comes from a page of another
// origin, or "". Browsers send Sec-Fetch-Site (all current ones) or at least
// Origin on requests a page makes; other clients send neither and pass. A
// navigation (a link followed: GET or HEAD, Sec-Fetch-Mode navigate, a
// document) passes too: it cannot read the answer or send a body, and the
// timeline page may be linked to.
func crossSite(r *http.Request) string {
	site := r.Header.Get("Sec-Fetch-Site")
	switch site {
	case "", "same-origin", "none":
	default:
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
			r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" {
			return ""
		}
		return fmt.Sprintf("a browser page of another origin (Sec-Fetch-Site: %s, Origin: %q) may not use this API: call it from a program, or from a page the node itself serves", site, r.Header.Get("Origin"))
	}
	origin := r.Header.Get("Origin")
	if site != "" || origin == "" {
		return ""
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) {
		return ""
	}
	return fmt.Sprintf("a browser page of another origin (Origin: %q) may not use this API: call it from a program, or from a page the node itself serves", origin)
}
