package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/callsheet/callsheet/tool"
)

// Defaults of WebOptions, used for a zero field.
const (
	// DefaultWebMaxBytes is the most of a response body webfetch reads
	// (5 MiB); the rest is left unread and the result says so.
	DefaultWebMaxBytes = 5 << 20
	// DefaultWebTimeout bounds one fetch, redirects and body included.
	DefaultWebTimeout = 30 * time.Second
	// DefaultWebMaxRedirects is how many redirects webfetch follows.
	DefaultWebMaxRedirects = 5
	// DefaultWebUserAgent is the User-Agent webfetch sends.
	DefaultWebUserAgent = "callsheet-webfetch/1 (+https://github.com/callsheet/callsheet)"
	// webTimeoutSlack is how much longer the tool's hard timeout is than the
	// fetch's own deadline, so that the fetch reports its clearer error first.
	webTimeoutSlack = 5 * time.Second
	// sniffWebBytes is how much of a body without a Content-Type decides
	// its type (http.DetectContentType reads 512 bytes).
	sniffWebBytes = 512
)

// ErrBlockedAddress is wrapped by the error webfetch returns for a URL it
// refuses to reach: a host outside a non-empty allow list, a cloud metadata
// host, or a host that is or resolves to a loopback, private, link-local,
// shared (CGNAT), unspecified, multicast or otherwise non-public address.
// The check applies to every redirect and to the address actually dialed.
//
// It is permanent (tool.IsPermanent): the runtime does not retry the call.
var ErrBlockedAddress = tool.Permanent(errors.New("tools: webfetch: address not allowed"))

// ErrInvalidWebOption is wrapped by the error WebFetch and WebSearch return
// for options that cannot apply: a negative limit, a malformed allow-list
// entry, a search endpoint that is not an http(s) URL.
var ErrInvalidWebOption = errors.New("tools: invalid web option")

// WebOptions configure the webfetch tool. The zero value is usable: every
// zero field takes the default named beside it.
type WebOptions struct {
	// AllowHosts is config web.allow_hosts. Empty (the default) lets
	// webfetch reach any host whose addresses are all public. Not empty, it
	// is the only hosts webfetch may reach, each written "example.com"
	// (that host, any port), "example.com:8443" (that port only) or
	// "*.example.com" (any subdomain, not example.com itself), matched
	// without regard to case; and those hosts are trusted to resolve to
	// private, loopback or link-local addresses, which is how an operator
	// lets webfetch reach an internal service. Cloud metadata addresses,
	// unspecified and multicast addresses are refused even then.
	AllowHosts []string
	// MaxBytes caps the body read from a response; 0 means
	// DefaultWebMaxBytes. A call's max_bytes may lower it, never raise it.
	MaxBytes int64
	// Timeout bounds one fetch (connecting, redirects, reading the body);
	// 0 means DefaultWebTimeout. The tool's hard timeout is 5 s longer.
	Timeout time.Duration
	// MaxRedirects is how many redirects a fetch follows; 0 means
	// DefaultWebMaxRedirects and a negative value follows none (the
	// redirect response itself is returned).
	MaxRedirects int
	// UserAgent is sent with every request; "" means DefaultWebUserAgent.
	UserAgent string
	// LookupIP resolves a host name to its addresses, with the signature of
	// (*net.Resolver).LookupIP; nil means net.DefaultResolver.LookupIP. The
	// addresses it returns are the ones checked and dialed, so a test can
	// map a name to an httptest server here.
	LookupIP func(ctx context.Context, network, host string) ([]net.IP, error)
}

// withDefaults returns o with every zero field set to its default.
func (o WebOptions) withDefaults() WebOptions {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultWebMaxBytes
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultWebTimeout
	}
	if o.MaxRedirects == 0 {
		o.MaxRedirects = DefaultWebMaxRedirects
	}
	if o.UserAgent == "" {
		o.UserAgent = DefaultWebUserAgent
	}
	if o.LookupIP == nil {
		o.LookupIP = net.DefaultResolver.LookupIP
	}
	return o
}

// Validate reports a negative MaxBytes or Timeout, or an AllowHosts entry
// that is not a host name, wrapping ErrInvalidWebOption.
func (o WebOptions) Validate() error {
	if o.MaxBytes < 0 {
		return fmt.Errorf("%w: MaxBytes %d is negative (use 0 for the default, %d)", ErrInvalidWebOption, o.MaxBytes, DefaultWebMaxBytes)
	}
	if o.Timeout < 0 {
		return fmt.Errorf("%w: Timeout %s is negative (use 0 for the default, %s)", ErrInvalidWebOption, o.Timeout, DefaultWebTimeout)
	}
	for i, h := range o.AllowHosts {
		if _, err := parseHostPattern(h); err != nil {
			return fmt.Errorf("%w: AllowHosts[%d]: %w", ErrInvalidWebOption, i, err)
		}
	}
	return nil
}

// webFetchArgs are the webfetch tool's arguments.
type webFetchArgs struct {
	URL      string `json:"url" jsonschema:"the http or https URL to fetch"`
	Format   string `json:"format,omitempty" jsonschema:"text (the default) turns HTML into readable text; raw returns the body as sent" enum:"text,raw" default:"text"`
	MaxBytes int64  `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes of the body (default and upper bound: the operator's limit)" minimum:"1"`
}

// WebFetch builds the webfetch tool: read_only, safe, parallel_safe, labelled
// external. A call fetches one http(s) URL with GET and returns one text part
// that starts with "URL: <final url>\nStatus: <code>\nContent-Type: <type>\n\n"
// followed by the body: HTML as readable text (or as sent with format raw),
// other text and JSON as sent; a body of any other type is refused with its
// content type. A response of any status is a result; the status line says
// which. The body is cut at MaxBytes with a note.
//
// Which hosts and addresses webfetch reaches is described at WebOptions's
// AllowHosts; the address check runs on every IP a host resolves to and on
// the IP actually dialed, for the first request and every redirect, so DNS
// rebinding cannot route a fetch to a refused address. The environment's
// HTTP proxy settings are ignored for the same reason.
//
// WebFetch returns an error wrapping ErrInvalidWebOption for options Validate
// refuses. A call's error wraps ErrBlockedAddress for a refused host or
// address. The tool is safe for concurrent use.
func WebFetch(opts WebOptions) (*tool.Tool, error) {
	return webFetch(opts, nil)
}

// webFetch is WebFetch with addresses to treat as public: tests, whose
// servers all listen on loopback, use it to stand one in for a public site.
func webFetch(opts WebOptions, public []netip.Prefix) (*tool.Tool, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	f := &fetcher{opts: o, public: public}
	for _, h := range o.AllowHosts {
		p, _ := parseHostPattern(h) // checked by Validate
		f.allow = append(f.allow, p)
	}
	f.client = &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil, // a proxy would dial for us, past the address check
			DialContext:           f.dial,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: o.Timeout,
		},
		CheckRedirect: f.checkRedirect,
	}
	reach := "Reaches any public host; private and internal addresses are refused."
	if len(o.AllowHosts) > 0 {
		reach = "Reaches only these hosts: " + strings.Join(o.AllowHosts, ", ") + "."
	}
	return tool.New("webfetch",
		fmt.Sprintf("Fetch one http or https URL with GET and return its body: HTML as readable text (headings, paragraphs, "+
			"list items, links as \"text (url)\"), other text and JSON as sent. Bodies are cut at %d bytes; binary "+
			"content is refused. %s", o.MaxBytes, reach),
		f.run,
		tool.WithWorkspaceFree(), tool.WithShortDescription("Fetch a URL (HTML as readable text)."),
		tool.WithGuidelines(
			"Use webfetch to read a page whose URL you have, such as one from web_search results or from the user.",
			"Use format raw only when you need the HTML source itself.",
			"Internal and private addresses (localhost, 10.x, 192.168.x, metadata endpoints) are refused; do not try to work around it.",
		),
		tool.WithSnippet(`{"url": "https://go.dev/doc/effective_go"}`),
		tool.WithDeclarations(tool.Declarations{
			Effect:      tool.EffectReadOnly,
			Replay:      tool.ReplaySafe,
			Concurrency: tool.ConcurrencyParallelSafe,
		}),
		tool.WithLabels(tool.LabelExternal),
		tool.WithTimeout(o.Timeout+webTimeoutSlack),
	)
}

// fetcher holds one webfetch tool's client and rules; safe for concurrent use.
type fetcher struct {
	opts   WebOptions
	allow  []hostPattern
	public []netip.Prefix // treated as public (tests only)
	client *http.Client
}

// refused is refusedAddr with the fetcher's test exceptions.
func (f *fetcher) refused(ip netip.Addr, trusted bool) string {
	for _, p := range f.public {
		if p.Contains(ip.Unmap()) {
			return ""
		}
	}
	return refusedAddr(ip, trusted)
}

// run is the webfetch tool's function.
func (f *fetcher) run(ctx context.Context, a webFetchArgs) (tool.Result, error) {
	if err := ctx.Err(); err != nil {
		return tool.Result{}, err
	}
	// A URL webfetch refuses is refused again on a retry: permanent.
	u, err := url.Parse(strings.TrimSpace(a.URL))
	if err != nil {
		return tool.Result{}, tool.Permanent(fmt.Errorf("webfetch: %q is not a URL: %v", a.URL, urlErrReason(err)))
	}
	if err := f.checkURL(u); err != nil {
		return tool.Result{}, tool.Permanent(fmt.Errorf("webfetch: %w", err))
	}
	limit := f.opts.MaxBytes
	if a.MaxBytes > 0 && a.MaxBytes < limit {
		limit = a.MaxBytes
	}

	fctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return tool.Result{}, fmt.Errorf("webfetch %s: %v", u.Redacted(), err)
	}
	req.Header.Set("User-Agent", f.opts.UserAgent)
	req.Header.Set("Accept", "text/html, application/xhtml+xml, text/*;q=0.9, application/json;q=0.9, */*;q=0.1")

	resp, err := f.client.Do(req)
	if err != nil {
		return tool.Result{}, f.fetchError(ctx, u, err)
	}
	defer resp.Body.Close()
	final := resp.Request.URL

	// The body is read through a limit one byte over the cap, so a body of
	// exactly the cap is not reported as cut.
	body := io.LimitReader(resp.Body, limit+1)
	head := make([]byte, min(limit+1, sniffWebBytes))
	n, err := io.ReadFull(body, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return tool.Result{}, f.fetchError(ctx, final, err)
	}
	head = head[:n]

	ctype := resp.Header.Get("Content-Type")
	shown := ctype
	if ctype == "" {
		ctype = http.DetectContentType(head)
		shown = ctype + " (sniffed; the server sent none)"
	}
	mediaType, params, err := mime.ParseMediaType(ctype)
	if err != nil {
		mediaType = strings.ToLower(strings.TrimSpace(strings.Split(ctype, ";")[0]))
	}
	kind := contentKind(mediaType)
	if kind == kindBinary {
		return tool.Result{}, tool.Permanent(fmt.Errorf("webfetch %s: the content type is %s, which is not text; webfetch returns HTML, text and JSON only", final.Redacted(), mediaType))
	}

	rest, err := io.ReadAll(body)
	if err != nil {
		return tool.Result{}, f.fetchError(ctx, final, err)
	}
	data := append(head, rest...)
	truncated := int64(len(data)) > limit
	if truncated {
		data = trimPartialRune(data[:limit])
	}
	text := decodeCharset(data, params["charset"])
	if kind == kindHTML && a.Format != "raw" {
		text = htmlToText(text, final)
		if text == "" {
			text = `(the page has no readable text; fetch it with "format": "raw" for its HTML)`
		}
	}

	var out strings.Builder
	fmt.Fprintf(&out, "URL: %s\nStatus: %d\nContent-Type: %s\n\n", final.Redacted(), resp.StatusCode, shown)
	out.WriteString(text)
	if truncated {
		fmt.Fprintf(&out, "\n\n(truncated: only the first %d bytes of the body were read", limit)
		if limit < f.opts.MaxBytes {
			fmt.Fprintf(&out, "; max_bytes may be raised to %d", f.opts.MaxBytes)
		}
		out.WriteString(")")
	}
	return tool.Text(out.String()), nil
}

// fetchError words an error of a fetch of u for the model, naming the
// redirect target when the error happened there. A cancelled call returns
// the context's error as is; the fetch's own deadline becomes a timeout
// message; a refused address keeps ErrBlockedAddress.
func (f *fetcher) fetchError(ctx context.Context, u *url.URL, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	where := u.Redacted()
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
		if target, perr := url.Parse(ue.URL); perr == nil && u.ResolveReference(target).String() != u.String() {
			target = u.ResolveReference(target) // a Location may be relative
			where += ": redirected to " + target.Redacted()
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("webfetch %s: timed out after %s", where, f.opts.Timeout)
	}
	return fmt.Errorf("webfetch %s: %w", where, err)
}

// checkURL refuses a URL webfetch must not request: not http(s), no host, a
// metadata host name, or a host outside a non-empty allow list. Addresses
// are checked when dialing.
func (f *fetcher) checkURL(u *url.URL) error {
	switch u.Scheme {
	case "http", "https":
	case "":
		return fmt.Errorf("%q has no scheme; give an absolute http:// or https:// URL", u.Redacted())
	default:
		return fmt.Errorf("the %s scheme is not supported (in %q); webfetch fetches http and https URLs only", u.Scheme, u.Redacted())
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%q has no host", u.Redacted())
	}
	if isMetadataHost(host) {
		return &blockedError{host: host, reason: "is a cloud metadata endpoint"}
	}
	if len(f.allow) > 0 && !f.allowListed(host, u.Port(), u.Scheme) {
		return &blockedError{host: host, reason: "is not in web.allow_hosts (" + strings.Join(f.opts.AllowHosts, ", ") + "), the only hosts webfetch may reach"}
	}
	return nil
}

// checkRedirect re-checks every redirect's URL and counts them.
func (f *fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if f.opts.MaxRedirects < 0 {
		return http.ErrUseLastResponse
	}
	if len(via) > f.opts.MaxRedirects {
		return fmt.Errorf("stopped after %d redirects (the limit)", f.opts.MaxRedirects)
	}
	return f.checkURL(req.URL)
}

// allowListed reports whether host (with port, "" for the scheme's default)
// matches an allow-list entry.
func (f *fetcher) allowListed(host, port, scheme string) bool {
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	for _, p := range f.allow {
		if p.match(host, port) {
			return true
		}
	}
	return false
}

// dial is the transport's DialContext. It resolves the host itself, refuses
// the connection unless every address passes the check, and dials the
// checked addresses only; a Control hook checks the socket's address once
// more, so nothing but a checked IP is ever connected to.
func (f *fetcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	// Without a proxy addr is the URL's host and port, already checked by
	// checkURL; scheme only matters for a port-less entry, and addr has one.
	trusted := len(f.allow) > 0 && f.allowListed(host, port, "")
	if len(f.allow) > 0 && !trusted {
		return nil, &blockedError{host: host, reason: "is not in web.allow_hosts (" + strings.Join(f.opts.AllowHosts, ", ") + "), the only hosts webfetch may reach"}
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		found, err := f.opts.LookupIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		for _, ip := range found {
			if a, ok := netip.AddrFromSlice(ip); ok {
				ips = append(ips, a.Unmap()) // net.IP holds IPv4 in 16 bytes
			}
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	for _, ip := range ips {
		if why := f.refused(ip, trusted); why != "" {
			return nil, &blockedError{host: host, ip: ip, reason: why}
		}
	}
	d := &net.Dialer{
		Timeout: 10 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &blockedError{host: host, reason: "dials an address that cannot be checked (" + address + ")"}
			}
			if why := f.refused(ap.Addr(), trusted); why != "" {
				return &blockedError{host: host, ip: ap.Addr(), reason: why}
			}
			if !trusted && ownAddress(ap.Addr()) {
				return &blockedError{host: host, ip: ap.Addr(), reason: "is an address of this host (one of its network interfaces)"}
			}
			return nil
		},
	}
	var first error
	for _, ip := range ips {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// blockedError is a refused host or address; it matches ErrBlockedAddress.
type blockedError struct {
	host   string
	ip     netip.Addr // zero when the host itself was refused
	reason string
}

func (e *blockedError) Error() string {
	what := e.host
	if e.ip.IsValid() && e.ip.String() != e.host {
		what = fmt.Sprintf("%s (%s)", e.host, e.ip)
	}
	if strings.Contains(e.reason, "web.allow_hosts") {
		return what + " " + e.reason
	}
	return what + " " + e.reason + "; webfetch refuses internal and non-public addresses " +
		"(an operator can allow an internal host in web.allow_hosts)"
}

func (e *blockedError) Unwrap() error { return ErrBlockedAddress }

// metadataAddrs are cloud metadata endpoints, refused even for allow-listed
// hosts: AWS, GCP and Azure (169.254.169.254), AWS over IPv6
// (fd00:ec2::254), AWS ECS task metadata (169.254.170.2) and Alibaba Cloud
// (100.100.100.200).
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("169.254.170.2"),
	netip.MustParseAddr("100.100.100.200"),
}

// Prefixes that embed an IPv4 address, and the IPv4 broadcast address.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	// v4Compatible is the deprecated IPv4-compatible form ::a.b.c.d (RFC
	// 4291 §2.5.5.1), siit the IPv4-translated form ::ffff:0:a.b.c.d (RFC
	// 2765): a kernel may route either to the IPv4 address it embeds.
	v4Compatible = netip.MustParsePrefix("::/96")
	siit         = netip.MustParsePrefix("::ffff:0:0:0/96")
	broadcast    = netip.MustParseAddr("255.255.255.255")
)

// nonPublic are the prefixes refused unless the host is allow-listed, beyond
// what netip.Addr's own predicates cover.
var nonPublic = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `is in 0.0.0.0/8 ("this network")`},
	{netip.MustParsePrefix("100.64.0.0/10"), "is a shared (CGNAT) address, 100.64.0.0/10"},
	{netip.MustParsePrefix("192.0.0.0/24"), "is an IETF protocol address, 192.0.0.0/24"},
	{netip.MustParsePrefix("198.18.0.0/15"), "is a benchmarking address, 198.18.0.0/15"},
	{netip.MustParsePrefix("240.0.0.0/4"), "is a reserved address, 240.0.0.0/4"},
	{netip.MustParsePrefix("fec0::/10"), "is a site-local address, fec0::/10"},
	{v4Compatible, "is an IPv4-compatible address, ::/96 (deprecated; it may be routed to the IPv4 address it embeds)"},
	{siit, "is an IPv4-translated (SIIT) address, ::ffff:0:0:0/96"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "is a local-use NAT64 address, 64:ff9b:1::/48"},
}

// refusedAddr says why webfetch must not connect to ip, or "" when it may.
// trusted (an allow-listed host) lifts every refusal but metadata,
// unspecified and multicast addresses. IPv4 addresses embedded in IPv6
// (mapped, IPv4-compatible ::/96, SIIT ::ffff:0:0:0/96, NAT64 64:ff9b::/96,
// 6to4 2002::/16) are judged as IPv4, and the IPv4-compatible and SIIT
// forms are refused anyway unless trusted. The host's own addresses are
// refused at connect time (ownAddress).
func refusedAddr(ip netip.Addr, trusted bool) string {
	ip = ip.Unmap()
	if ip.Is6() {
		b := ip.As16()
		switch {
		case (v4Compatible.Contains(ip) || siit.Contains(ip)) && !ip.IsUnspecified() && !ip.IsLoopback():
			if why := refusedAddr(netip.AddrFrom4([4]byte(b[12:16])), trusted); why != "" {
				return "embeds an IPv4 address that " + why
			}
		case nat64.Contains(ip):
			if why := refusedAddr(netip.AddrFrom4([4]byte(b[12:16])), trusted); why != "" {
				return "embeds an IPv4 address that " + why
			}
		case sixToFour.Contains(ip):
			if why := refusedAddr(netip.AddrFrom4([4]byte(b[2:6])), trusted); why != "" {
				return "embeds an IPv4 address that " + why
			}
		}
	}
	for _, m := range metadataAddrs {
		if ip == m {
			return "is a cloud metadata endpoint"
		}
	}
	switch {
	case ip.IsUnspecified():
		return "is an unspecified address"
	case ip.IsMulticast():
		return "is a multicast address"
	case ip == broadcast:
		return "is the broadcast address"
	case trusted:
		return ""
	case ip.IsLoopback():
		return "is a loopback address"
	case ip.IsPrivate():
		return "is a private address"
	case ip.IsLinkLocalUnicast():
		return "is a link-local address"
	}
	for _, n := range nonPublic {
		if n.prefix.Contains(ip) {
			return n.reason
		}
	}
	return ""
}

// ownAddress reports whether ip is an address of one of this host's
// network interfaces, as the interfaces are now: services that listen on
// the host's own address (or on all of them) are the host's, whatever
// range the address is in. An address that cannot be checked counts as
// the host's.
func ownAddress(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	ip = ip.Unmap().WithZone("")
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap().WithZone("") == ip {
			return true
		}
	}
	return false
}

// isMetadataHost reports a cloud metadata host name.
func isMetadataHost(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	return h == "metadata.google.internal" || h == "metadata"
}

// hostPattern is one allow-list entry: an exact host or, with wildcard, any
// subdomain of host; port "" matches any port.
type hostPattern struct {
	host     string
	port     string
	wildcard bool
}

// parseHostPattern parses "example.com", "example.com:8443",
// "*.example.com" or an IP address ("10.0.0.5", "[fd00::1]:8080").
func parseHostPattern(s string) (hostPattern, error) {
	raw := s
	var p hostPattern
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		p.wildcard, s = true, rest
	}
	if s == "" || strings.ContainsAny(s, "/@?# \t\r\n*") {
		return p, fmt.Errorf("%q is not a host name (write the host only, such as \"example.com\" or \"*.example.com\")", raw)
	}
	u, err := url.Parse("http://" + s)
	if err != nil || u.Host != s || u.Hostname() == "" {
		return p, fmt.Errorf("%q is not a host name (write the host only, such as \"example.com\" or \"*.example.com\")", raw)
	}
	p.host = strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	p.port = u.Port()
	if p.port != "" {
		if n, err := strconv.Atoi(p.port); err != nil || n < 1 || n > 65535 {
			return p, fmt.Errorf("%q has port %q, not 1..65535", raw, p.port)
		}
	}
	return p, nil
}

// match reports whether host and port (a number) fit the pattern.
func (p hostPattern) match(host, port string) bool {
	if p.port != "" && p.port != port {
		return false
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		// Compare addresses, not spellings ("::1" and "0:0::1").
		pip, perr := netip.ParseAddr(p.host)
		return !p.wildcard && perr == nil && pip.Unmap() == ip.Unmap()
	}
	if p.wildcard {
		return strings.HasSuffix(h, "."+p.host)
	}
	return h == p.host
}

// Kinds of content webfetch tells apart.
const (
	kindBinary = iota
	kindText
	kindHTML
)

// contentKind sorts a media type: HTML, other text (text/*, JSON, XML,
// JavaScript, YAML and the like), or binary.
func contentKind(mediaType string) int {
	switch {
	case mediaType == "text/html", mediaType == "application/xhtml+xml":
		return kindHTML
	case strings.HasPrefix(mediaType, "text/"),
		strings.HasSuffix(mediaType, "+json"), strings.HasSuffix(mediaType, "+xml"),
		strings.HasSuffix(mediaType, "+yaml"):
		return kindText
	}
	switch mediaType {
	case "application/json", "application/ld+json", "application/x-ndjson", "application/xml",
		"application/javascript", "application/ecmascript", "application/x-javascript",
		"application/yaml", "application/x-yaml", "application/toml", "application/x-sh",
		"application/sql", "application/graphql", "application/csv":
		return kindText
	}
	return kindBinary
}

// decodeCharset turns a body into UTF-8 text: ISO-8859-1 (and, roughly,
// windows-1252) byte for byte, anything else as UTF-8 with invalid bytes
// replaced.
func decodeCharset(b []byte, charset string) string {
	switch strings.ToLower(strings.TrimSpace(charset)) {
	case "iso-8859-1", "latin1", "latin-1", "l1", "windows-1252", "cp1252":
		r := make([]rune, len(b))
		for i, c := range b {
			r[i] = rune(c)
		}
		return string(r)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// trimPartialRune drops a UTF-8 sequence cut at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return b // ASCII: nothing is cut
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// urlErrReason returns the reason of a url.Parse error without the URL,
// which the caller quotes itself.
func urlErrReason(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
