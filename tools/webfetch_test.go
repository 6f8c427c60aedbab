package tools

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callsheet/callsheet/tool"
)

// fakeDNS maps host names to addresses, like a resolver with fixed records;
// any other name does not resolve.
func fakeDNS(records map[string][]string) func(context.Context, string, string) ([]net.IP, error) {
	return func(_ context.Context, _, host string) ([]net.IP, error) {
		addrs, ok := records[strings.ToLower(host)]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var ips []net.IP
		for _, a := range addrs {
			ips = append(ips, net.ParseIP(a))
		}
		return ips, nil
	}
}

// serve starts an httptest server on addr ("127.0.0.1:0" or another
// loopback address) and returns it and its port.
func serve(t *testing.T, addr string, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return srv, u.Port()
}

// fetchTool builds webfetch with opts; public addresses stand in for public
// sites.
func fetchTool(t *testing.T, opts WebOptions, public ...string) *tool.Tool {
	t.Helper()
	var pp []netip.Prefix
	for _, p := range public {
		pp = append(pp, netip.MustParsePrefix(p))
	}
	tl, err := webFetch(opts, pp)
	if err != nil {
		t.Fatalf("webFetch: %v", err)
	}
	return tl
}

// fetch runs one webfetch call for u.
func fetch(t *testing.T, tl *tool.Tool, u string, extra ...string) (tool.Result, error) {
	t.Helper()
	args := fmt.Sprintf(`{"url": %q%s}`, u, strings.Join(extra, ""))
	return call(t, context.Background(), tl, args)
}

// mustBlock fails unless err is a refusal naming why.
func mustBlock(t *testing.T, err error, why string) {
	t.Helper()
	if !errors.Is(err, ErrBlockedAddress) {
		t.Fatalf("err=%v, want one matching ErrBlockedAddress", err)
	}
	mustContain(t, err.Error(), why)
}

func TestWebFetchDeclarations(t *testing.T) {
	tl := fetchTool(t, WebOptions{})
	want := tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}
	if tl.Name != "webfetch" || tl.Declarations != want {
		t.Errorf("name=%q declarations=%+v, want webfetch %+v", tl.Name, tl.Declarations, want)
	}
	if len(tl.Labels) != 1 || tl.Labels[0] != tool.LabelExternal {
		t.Errorf("labels=%v, want [external]", tl.Labels)
	}
	if got, want := tl.EffectiveTimeout(), DefaultWebTimeout+webTimeoutSlack; got != want {
		t.Errorf("timeout=%s, want %s", got, want)
	}
	if err := tl.Validate([]byte(`{"url": "https://example.com", "format": "pdf"}`)); err == nil {
		t.Error(`Validate accepted format "pdf"`)
	}
}

func TestWebFetchRefusesLoopbackLiteral(t *testing.T) {
	var hit atomic.Bool
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit.Store(true) }))
	_, err := fetch(t, fetchTool(t, WebOptions{}), srv.URL)
	mustBlock(t, err, "127.0.0.1 is a loopback address")
	if hit.Load() {
		t.Error("the loopback server was reached")
	}
}

func TestWebFetchRefusesPrivateNames(t *testing.T) {
	dns := fakeDNS(map[string][]string{
		"internal.test": {"10.0.0.5"},
		"local.test":    {"127.0.0.1"},
		"mixed.test":    {"93.184.216.34", "192.168.1.10"},
		"meta.test":     {"169.254.169.254"},
		"cgnat.test":    {"100.64.3.4"},
		"v6.test":       {"fd12::1"},
		"mapped.test":   {"::ffff:127.0.0.1"},
		"compat.test":   {"::127.0.0.1"},
		"siit.test":     {"::ffff:0:7f00:1"},
	})
	tl := fetchTool(t, WebOptions{LookupIP: dns})
	tests := []struct{ url, why string }{
		{"http://internal.test/", "internal.test (10.0.0.5) is a private address"},
		{"http://local.test:8080/x", "local.test (127.0.0.1) is a loopback address"},
		{"https://mixed.test/", "mixed.test (192.168.1.10) is a private address"},
		{"http://meta.test/latest/meta-data/", "is a cloud metadata endpoint"},
		{"http://cgnat.test/", "shared (CGNAT)"},
		{"http://v6.test/", "is a private address"},
		{"http://mapped.test/", "is a loopback address"},
		{"http://compat.test/", "compat.test (::7f00:1) embeds an IPv4 address that is a loopback address"},
		{"http://siit.test/", "siit.test (::ffff:0:7f00:1) embeds an IPv4 address that is a loopback address"},
		{"http://[::127.0.0.1]:9/", "embeds an IPv4 address that is a loopback address"},
		{"http://[::ffff:0:7f00:1]:9/", "embeds an IPv4 address that is a loopback address"},
		{"http://[::ffff:0:a00:5]/", "embeds an IPv4 address that is a private address"},
		{"http://[::8.8.8.8]/", "is an IPv4-compatible address"},
		{"http://[::ffff:0:808:808]/", "is an IPv4-translated (SIIT) address"},
		{"http://[64:ff9b:1::a00:5]/", "is a local-use NAT64 address"},
		{"http://[64:ff9b::127.0.0.1]/", "embeds an IPv4 address that is a loopback address"},
		{"http://169.254.169.254/latest/meta-data/", "cloud metadata endpoint"},
		{"http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal is a cloud metadata endpoint"},
		{"http://[::1]:9/", "is a loopback address"},
		{"http://0.0.0.0:9/", "unspecified"},
		{"http://[fe80::1%25eth0]/", "link-local"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := fetch(t, tl, tt.url)
			mustBlock(t, err, tt.why)
		})
	}
}

// TestWebFetchRefusesTheHostsOwnAddresses: a server listening on the
// host's own interface address (here, an address the policy would pass as
// public) is refused when it is dialled, by address and by a name that
// leads there, and never reached; an allow-listed name may reach it.
func TestWebFetchRefusesTheHostsOwnAddresses(t *testing.T) {
	own := hostAddress(t)
	var hit atomic.Int32
	_, port := serve(t, net.JoinHostPort(own.String(), "0"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hit.Add(1)
		fmt.Fprint(w, "the host's own service")
	}))
	dns := fakeDNS(map[string][]string{"own.test": {own.String()}, "trusted.test": {own.String()}})
	tl := fetchTool(t, WebOptions{LookupIP: dns}, own.String()+"/32") // public by range
	for _, u := range []string{"http://" + net.JoinHostPort(own.String(), port) + "/", "http://own.test:" + port + "/"} {
		_, err := fetch(t, tl, u)
		mustBlock(t, err, "is an address of this host")
		mustContain(t, err.Error(), own.String())
	}
	if n := hit.Load(); n != 0 {
		t.Fatalf("the host's own service was reached %d times", n)
	}
	trusted := fetchTool(t, WebOptions{LookupIP: dns, AllowHosts: []string{"trusted.test"}})
	r, err := fetch(t, trusted, "http://trusted.test:"+port+"/")
	if err != nil || !strings.Contains(text(t, r), "the host's own service") {
		t.Fatalf("an allow-listed name of the host: %v", err)
	}
}

// TestOwnAddress: every address of every interface is the host's, loopback
// included; an address of no interface is not.
func TestOwnAddress(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		p := netip.MustParsePrefix(a.String())
		if !ownAddress(p.Addr()) {
			t.Errorf("ownAddress(%s) = false", p.Addr())
		}
		if p.Addr().Is4() && !ownAddress(netip.AddrFrom16(p.Addr().As16())) {
			t.Errorf("ownAddress(%s as IPv4-mapped) = false", p.Addr())
		}
	}
	for _, s := range []string{"127.0.0.3", "203.0.113.77", "2001:db8::77"} {
		if ownAddress(netip.MustParseAddr(s)) {
			t.Errorf("ownAddress(%s) = true", s)
		}
	}
}

// hostAddress is an IPv4 address of one of the host's interfaces that is
// not loopback; the test is skipped without one.
func hostAddress(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
			return p.Addr()
		}
	}
	t.Skip("the host has no interface address beyond loopback")
	return netip.Addr{}
}

func TestWebFetchAllowListedHostMayBeInternal(t *testing.T) {
	_, port := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	dns := fakeDNS(map[string][]string{"public.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"}, "api.corp.test": {"127.0.0.1"}})
	tl := fetchTool(t, WebOptions{AllowHosts: []string{"public.test", "*.corp.test"}, LookupIP: dns})

	r, err := fetch(t, tl, "http://public.test:"+port+"/")
	if err != nil {
		t.Fatalf("allow-listed host: %v", err)
	}
	want := "URL: http://public.test:" + port + "/\nStatus: 200\nContent-Type: text/plain; charset=utf-8\n\nhello from public.test:" + port
	if got := text(t, r); got != want {
		t.Errorf("text=%q, want %q", got, want)
	}
	if _, err := fetch(t, tl, "http://api.corp.test:"+port+"/"); err != nil {
		t.Errorf("wildcard allow-listed host: %v", err)
	}
	_, err = fetch(t, tl, "http://other.test:"+port+"/")
	mustBlock(t, err, "other.test is not in web.allow_hosts")
	// The allow list names hosts, not the addresses they resolve to.
	_, err = fetch(t, tl, "http://127.0.0.1:"+port+"/")
	mustBlock(t, err, "not in web.allow_hosts")
}

func TestWebFetchMetadataRefusedEvenWhenAllowListed(t *testing.T) {
	dns := fakeDNS(map[string][]string{"public.test": {"169.254.169.254"}})
	tl := fetchTool(t, WebOptions{AllowHosts: []string{"public.test", "metadata.google.internal"}, LookupIP: dns})
	_, err := fetch(t, tl, "http://public.test/")
	mustBlock(t, err, "cloud metadata endpoint")
	_, err = fetch(t, tl, "http://metadata.google.internal/")
	mustBlock(t, err, "cloud metadata endpoint")
}

func TestWebFetchRedirects(t *testing.T) {
	internalHit := make(chan struct{}, 10)
	_, internalPort := serve(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internalHit <- struct{}{}
		fmt.Fprint(w, "internal secret")
	}))
	_, loopPort := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internalHit <- struct{}{}
		fmt.Fprint(w, "loopback secret")
	}))
	var hops atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/to-internal", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.2:"+internalPort+"/", http.StatusFound)
	})
	mux.HandleFunc("/to-rebind", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://rebind.test:"+internalPort+"/", http.StatusFound)
	})
	mux.HandleFunc("/to-loopback", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.1:"+loopPort+"/", http.StatusFound)
	})
	mux.HandleFunc("/to-file", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		hops.Add(1)
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/final", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/final", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "landed") })
	_, port := serve(t, "127.0.0.3:0", mux)
	dns := fakeDNS(map[string][]string{"public.test": {"127.0.0.3"}, "rebind.test": {"127.0.0.2"}})
	base := "http://public.test:" + port

	t.Run("dial check", func(t *testing.T) {
		// 127.0.0.3 stands in for a public site (no interface has it);
		// 127.0.0.2 stays loopback.
		tl := fetchTool(t, WebOptions{LookupIP: dns}, "127.0.0.3/32")
		r, err := fetch(t, tl, base+"/ok")
		if err != nil {
			t.Fatalf("a redirect within the public site: %v", err)
		}
		mustContain(t, text(t, r), "URL: "+base+"/final\n", "landed")

		_, err = fetch(t, tl, base+"/to-internal")
		mustBlock(t, err, "webfetch "+base+"/to-internal: redirected to http://127.0.0.2:"+internalPort+"/: 127.0.0.2 is a loopback address")
		_, err = fetch(t, tl, base+"/to-rebind")
		mustBlock(t, err, "rebind.test (127.0.0.2) is a loopback address")
		_, err = fetch(t, tl, base+"/to-file")
		if err == nil || !strings.Contains(err.Error(), "the file scheme is not supported") {
			t.Errorf("redirect to file: err=%v, want a scheme refusal", err)
		}
		_, err = fetch(t, tl, base+"/loop")
		if err == nil || !strings.Contains(err.Error(), "stopped after 5 redirects") {
			t.Errorf("redirect loop: err=%v, want the redirect limit", err)
		}
		if got := hops.Load(); got != DefaultWebMaxRedirects+1 {
			t.Errorf("hops=%d, want %d", got, DefaultWebMaxRedirects+1)
		}
	})
	t.Run("allow list", func(t *testing.T) {
		tl := fetchTool(t, WebOptions{AllowHosts: []string{"public.test"}, LookupIP: dns})
		_, err := fetch(t, tl, base+"/to-loopback")
		mustBlock(t, err, "127.0.0.1 is not in web.allow_hosts")
		_, err = fetch(t, tl, base+"/to-rebind")
		mustBlock(t, err, "rebind.test is not in web.allow_hosts")
	})
	t.Run("no redirects", func(t *testing.T) {
		tl := fetchTool(t, WebOptions{LookupIP: dns, MaxRedirects: -1}, "127.0.0.3/32")
		r, err := fetch(t, tl, base+"/to-internal")
		if err != nil {
			t.Fatal(err)
		}
		mustContain(t, text(t, r), "Status: 302\n")
	})
	select {
	case <-internalHit:
		t.Error("an internal server was reached through a redirect")
	default:
	}
}

func TestWebFetchHTML(t *testing.T) {
	const page = `<!DOCTYPE html>
<html><head><title>Ignored title</title><style>body{color:red}</style>
<script>var secret = "<p>not text</p>";</script></head>
<body><nav><a href="/home">Home</a> | <a href="/about">About</a></nav>
<h1>Main   heading</h1>
<p>First &amp; <b>bold</b>
   paragraph with a <a href="/docs/x?a=1&amp;b=2">relative link</a>.</p>
<!-- a comment <p>hidden</p> -->
<ul><li>one</li><li>two <a href="https://example.com/">https://example.com/</a></li></ul>
<h2>Sub</h2><pre>  keep
    this</pre>
<p>caf&eacute; &#x2713;</p>
</body></html>`
	_, port := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	}))
	tl := fetchTool(t, WebOptions{AllowHosts: []string{"public.test"}, LookupIP: fakeDNS(map[string][]string{"public.test": {"127.0.0.1"}})})
	u := "http://public.test:" + port + "/page"
	r, err := fetch(t, tl, u)
	if err != nil {
		t.Fatal(err)
	}
	want := "URL: " + u + "\nStatus: 200\nContent-Type: text/html; charset=utf-8\n\n" +
		"# Main heading\n\n" +
		"First & bold paragraph with a relative link (http://public.test:" + port + "/docs/x?a=1&b=2).\n\n" +
		"- one\n- two https://example.com/\n\n" +
		"## Sub\n\n" +
		"  keep\n    this\n\n" +
		"café ✓"
	if got := text(t, r); got != want {
		t.Errorf("text=\n%s\nwant\n%s", got, want)
	}

	r, err = fetch(t, tl, u, `, "format": "raw"`)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, text(t, r), "<script>var secret")
}

func TestWebFetchContentTypes(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"a": [1, 2]}`)
	})
	mux.HandleFunc("/png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\nxxxx"))
	})
	mux.HandleFunc("/none", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // no sniffing by the server
		fmt.Fprint(w, "plain words")
	})
	mux.HandleFunc("/latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=ISO-8859-1")
		w.Write([]byte("caf\xe9"))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	_, port := serve(t, "127.0.0.1:0", mux)
	tl := fetchTool(t, WebOptions{AllowHosts: []string{"public.test"}, LookupIP: fakeDNS(map[string][]string{"public.test": {"127.0.0.1"}})})
	base := "http://public.test:" + port

	r, err := fetch(t, tl, base+"/json")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, text(t, r), "Content-Type: application/json\n\n{\"a\": [1, 2]}")

	_, err = fetch(t, tl, base+"/png")
	if err == nil || !strings.Contains(err.Error(), "the content type is image/png, which is not text") {
		t.Errorf("png: err=%v, want a refusal naming image/png", err)
	}

	r, err = fetch(t, tl, base+"/none")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, text(t, r), "Content-Type: text/plain; charset=utf-8 (sniffed; the server sent none)\n\nplain words")

	r, err = fetch(t, tl, base+"/latin1")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, text(t, r), "\n\ncafé")

	r, err = fetch(t, tl, base+"/missing")
	if err != nil {
		t.Fatalf("a 404 is a result, not an error: %v", err)
	}
	mustContain(t, text(t, r), "Status: 404\n", "404 page not found")
}

func TestWebFetchSizeCap(t *testing.T) {
	body := strings.Repeat("0123456789", 1000) // 10,000 bytes
	_, port := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, body)
	}))
	dns := fakeDNS(map[string][]string{"public.test": {"127.0.0.1"}})
	tl := fetchTool(t, WebOptions{AllowHosts: []string{"public.test"}, LookupIP: dns, MaxBytes: 1000})
	u := "http://public.test:" + port + "/"
	head := "URL: " + u + "\nStatus: 200\nContent-Type: text/plain\n\n"

	tests := []struct {
		name, extra, want string
	}{
		{"operator cap", "", head + body[:1000] + "\n\n(truncated: only the first 1000 bytes of the body were read)"},
		{"call lowers it", `, "max_bytes": 10`, head + body[:10] + "\n\n(truncated: only the first 10 bytes of the body were read; max_bytes may be raised to 1000)"},
		{"call cannot raise it", `, "max_bytes": 1000000`, head + body[:1000] + "\n\n(truncated: only the first 1000 bytes of the body were read)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := fetch(t, tl, u, tt.extra)
			if err != nil {
				t.Fatal(err)
			}
			if got := text(t, r); got != tt.want {
				t.Errorf("text=%q, want %q", got, tt.want)
			}
		})
	}

	exact := fetchTool(t, WebOptions{AllowHosts: []string{"public.test"}, LookupIP: dns, MaxBytes: int64(len(body))})
	r, err := fetch(t, exact, u)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, r); strings.Contains(got, "truncated") {
		t.Errorf("a body of exactly MaxBytes was reported truncated")
	}
}

func TestWebFetchTimeout(t *testing.T) {
	release := make(chan struct{})
	_, port := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	tl := fetchTool(t, WebOptions{AllowHosts: []string{"public.test"}, LookupIP: fakeDNS(map[string][]string{"public.test": {"127.0.0.1"}}), Timeout: 100 * time.Millisecond})
	_, err := fetch(t, tl, "http://public.test:"+port+"/slow")
	if err == nil || !strings.Contains(err.Error(), "timed out after 100ms") {
		t.Fatalf("err=%v, want a timeout", err)
	}

	// A cancelled call returns the context's error, not a message.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tl.Run(ctx, []byte(`{"url": "http://public.test:`+port+`/slow"}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err=%v, want context.Canceled", err)
	}
}

func TestWebFetchSchemes(t *testing.T) {
	tl := fetchTool(t, WebOptions{})
	tests := []struct{ url, want string }{
		{"file:///etc/passwd", "the file scheme is not supported"},
		{"ftp://example.com/x", "the ftp scheme is not supported"},
		{"gopher://example.com/", "the gopher scheme is not supported"},
		{"example.com/page", "has no scheme"},
		{"http:///nohost", "has no host"},
		{"http://exa mple.com/", "is not a URL"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := fetch(t, tl, tt.url)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err=%v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestWebOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		opts WebOptions
		ok   bool
	}{
		{"zero", WebOptions{}, true},
		{"hosts", WebOptions{AllowHosts: []string{"example.com", "*.example.org", "intranet:8080", "10.0.0.5", "[fd00::1]:443"}}, true},
		{"negative max bytes", WebOptions{MaxBytes: -1}, false},
		{"negative timeout", WebOptions{Timeout: -time.Second}, false},
		{"url as host", WebOptions{AllowHosts: []string{"https://example.com"}}, false},
		{"path", WebOptions{AllowHosts: []string{"example.com/x"}}, false},
		{"bad port", WebOptions{AllowHosts: []string{"example.com:99999"}}, false},
		{"bare star", WebOptions{AllowHosts: []string{"*"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := WebFetch(tt.opts)
			if tt.ok != (err == nil) {
				t.Fatalf("err=%v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidWebOption) {
				t.Errorf("err=%v, want one matching ErrInvalidWebOption", err)
			}
		})
	}
}

func TestHostPatternMatch(t *testing.T) {
	tests := []struct {
		pattern, host, port string
		want                bool
	}{
		{"example.com", "example.com", "443", true},
		{"example.com", "EXAMPLE.com.", "80", true},
		{"example.com", "www.example.com", "443", false},
		{"*.example.com", "www.example.com", "443", true},
		{"*.example.com", "a.b.example.com", "443", true},
		{"*.example.com", "example.com", "443", false},
		{"*.example.com", "badexample.com", "443", false},
		{"intranet:8080", "intranet", "8080", true},
		{"intranet:8080", "intranet", "80", false},
		{"10.0.0.5", "10.0.0.5", "80", true},
		{"[fd00::1]", "fd00:0::1", "80", true},
		{"10.0.0.5", "10.0.0.6", "80", false},
	}
	for _, tt := range tests {
		p, err := parseHostPattern(tt.pattern)
		if err != nil {
			t.Fatalf("parseHostPattern(%q): %v", tt.pattern, err)
		}
		if got := p.match(tt.host, tt.port); got != tt.want {
			t.Errorf("%q matches %s:%s = %v, want %v", tt.pattern, tt.host, tt.port, got, tt.want)
		}
	}
}

func TestRefusedAddr(t *testing.T) {
	tests := []struct {
		ip             string
		refused        bool
		refusedTrusted bool
	}{
		{"93.184.216.34", false, false},
		{"2606:2800:220:1:248:1893:25c8:1946", false, false},
		{"127.0.0.1", true, false},
		{"127.8.9.10", true, false},
		{"::1", true, false},
		{"10.1.2.3", true, false},
		{"172.16.0.1", true, false},
		{"172.32.0.1", false, false},
		{"192.168.0.1", true, false},
		{"fc00::1", true, false},
		{"169.254.1.1", true, false},
		{"fe80::1", true, false},
		{"100.64.0.1", true, false},
		{"100.127.255.255", true, false},
		{"100.128.0.1", false, false},
		{"0.0.0.0", true, true},
		{"::", true, true},
		{"224.0.0.1", true, true},
		{"ff02::1", true, true},
		{"255.255.255.255", true, true},
		{"169.254.169.254", true, true},
		{"fd00:ec2::254", true, true},
		{"100.100.100.200", true, true},
		{"::ffff:10.0.0.1", true, false},
		{"64:ff9b::a00:1", true, false},
		{"64:ff9b::5db8:d822", false, false},
		{"2002:7f00:1::", true, false},
		{"2002:a9fe:a9fe::", true, true},
	}
	for _, tt := range tests {
		ip := netip.MustParseAddr(tt.ip)
		if got := refusedAddr(ip, false) != ""; got != tt.refused {
			t.Errorf("refusedAddr(%s, untrusted)=%q, want refused=%v", tt.ip, refusedAddr(ip, false), tt.refused)
		}
		if got := refusedAddr(ip, true) != ""; got != tt.refusedTrusted {
			t.Errorf("refusedAddr(%s, trusted)=%q, want refused=%v", tt.ip, refusedAddr(ip, true), tt.refusedTrusted)
		}
	}
}
