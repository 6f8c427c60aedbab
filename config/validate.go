package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/callsheet/callsheet/decl"
)

// Validate reports every problem with c, joined in field order (map entries
// in key order) with errors.Join; each is an *Error wrapping ErrInvalid, and
// errors.As finds the first. It returns nil for a valid Config, such as
// DefaultConfig(). Validate checks what the configuration alone can tell: it
// does not know which tools exist, so a tool name is checked for its form,
// not its presence, and input schemas are checked for their outer shape
// only (they are compiled where tools are registered).
func (c Config) Validate() error {
	return join(c.validate())
}

// namePattern is the form of tool, command tool, agent, tenant and rule
// names: what model providers accept as a function name.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

const nameRule = "use 1 to 64 letters, digits, '_' or '-'"

// principalPattern is the form of a token's principal: a name such as
// "alice" or "alice@example.com", which the log records and the "denied by
// <principal>" reasons quote.
var principalPattern = regexp.MustCompile(`^[A-Za-z0-9._@+-]{1,128}$`)

const principalRule = "use 1 to 128 letters, digits, '.', '_', '@', '+' or '-'"

type checker struct{ errs []*Error }

// token checks a bearer token of tenant at path, given in the clear (tok)
// or as its SHA-256 (sum, hex), and records its digest in seen (digest →
// tenant), reporting false for a missing, malformed or duplicate one. It
// never echoes a token: error messages end up in logs.
func (ch *checker) token(path, tok, sum, tenant string, seen map[[sha256.Size]byte]string) bool {
	var digest [sha256.Size]byte
	switch {
	case tok != "" && sum != "":
		ch.add(path, "both \"token\" and \"token_sha256\": give one (the SHA-256 keeps the token itself out of the file)")
		return false
	case sum != "":
		path += "_sha256"
		b, err := hex.DecodeString(sum)
		if err != nil || len(b) != sha256.Size {
			ch.add(path, "not a SHA-256 in hex (64 hex digits: printf %%s \"$TOKEN\" | sha256sum)")
			return false
		}
		copy(digest[:], b)
	case strings.TrimSpace(tok) == "":
		ch.add(path, "missing (give every tenant a bearer token: \"token\", or \"tokens\": [{\"token\" or \"token_sha256\", \"principal\", \"scopes\"}])")
		return false
	case strings.ContainsFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		ch.add(path, "contains a space or control character (a bearer token is one word)")
		return false
	default:
		digest = sha256.Sum256([]byte(tok))
	}
	if other, dup := seen[digest]; dup {
		if other == tenant {
			ch.add(path, "same token as another of tenant %q's tokens (each token names one principal)", other)
		} else {
			ch.add(path, "same token as tenant %q (each tenant needs its own token)", other)
		}
		return false
	}
	seen[digest] = tenant
	return true
}

// tenants checks the tenants at base ("tenants"): names, tokens (unique
// across every tenant), principals, scopes, retention, and each tenant's
// limits as they come out over the node's (limits, maxBytes).
func (ch *checker) tenants(base string, tenants map[string]Tenant, limits Limits, maxBytes int) {
	seen := map[[sha256.Size]byte]string{}
	for _, name := range slices.Sorted(maps.Keys(tenants)) {
		p := joinKey(base, name)
		ch.name(p, "tenant", name)
		t := tenants[name]
		if t.Token != "" || len(t.Tokens) == 0 {
			if ch.token(p+".token", t.Token, "", name, seen) && name == ReservedPrincipal {
				ch.add(p+".token", "a tenant named %q cannot use \"token\", whose principal is the tenant's name: %q is what the log records for an approval timeout (use \"tokens\" with a \"principal\")", name, ReservedPrincipal)
			}
		}
		for i, tok := range t.Tokens {
			tp := p + ".tokens[" + strconv.Itoa(i) + "]"
			ch.token(tp+".token", tok.Token, tok.TokenSHA256, name, seen)
			switch principal := tok.Principal; {
			case principal == "" && name == ReservedPrincipal:
				ch.add(tp+".principal", "missing, and the default, the tenant's name %q, is what the log records for an approval timeout: name the principal", name)
			case principal == "":
			case !principalPattern.MatchString(principal):
				ch.add(tp+".principal", "%q is not a valid principal (%s)", principal, principalRule)
			case principal == ReservedPrincipal:
				ch.add(tp+".principal", "%q is reserved: the log records it for an approval nobody decided in time", principal)
			}
			ch.scopes(tp+".scopes", tok.Scopes)
		}
		if r := t.Retention.Std(); r != 0 && r < MinRetention {
			ch.add(p+".retention", "%s is below the minimum of %s (a duration such as \"720h\"; leave it out to keep sessions until deleted)", t.Retention, MinRetention)
		}
		ch.tenantLimits(p+".limits", t.Limits, limits, maxBytes)
	}
}

// scopes checks a token's scopes: known names, each once, and not an empty
// list (which would allow nothing: leaving scopes out allows everything).
func (ch *checker) scopes(path string, scopes []string) {
	if scopes != nil && len(scopes) == 0 {
		ch.add(path, "empty: a token with no scope could do nothing; name its scopes (%s), or leave \"scopes\" out for all of them", strings.Join(Scopes(), ", "))
		return
	}
	seen := map[string]bool{}
	for i, s := range scopes {
		sp := path + "[" + strconv.Itoa(i) + "]"
		switch {
		case !slices.Contains(Scopes(), s):
			ch.add(sp, "%q is not a scope (scopes: %s)", s, strings.Join(Scopes(), ", "))
		case seen[s]:
			ch.add(sp, "%q is given twice", s)
		}
		seen[s] = true
	}
}

// tenantLimits checks a tenant's limits as they come out over the node's
// (own's non-zero fields in place of node's): every check of the node's own
// limits, each problem named at the tenant's key. The node's limits are
// checked (and must pass) first, so what fails here is the tenant's doing.
func (ch *checker) tenantLimits(path string, own, node Limits, maxBytes int) {
	if own == (Limits{}) {
		return
	}
	first := &checker{}
	if first.limits(node, maxBytes); len(first.errs) > 0 {
		return // reported at limits.*
	}
	sub := &checker{}
	sub.limits(node.With(own), maxBytes)
	for _, e := range sub.errs {
		ch.add(path+strings.TrimPrefix(e.Path, "limits"), "%s (a tenant's limits replace the node's field by field; the fields it leaves out keep limits.*)", strings.ReplaceAll(e.Reason, "limits.", path+"."))
	}
	if own.Workers != (Workers{}) {
		ch.add(path+".workers", "the workers are the node's, shared by every tenant: set limits.workers; the tenant's share of them is %s.workers_per_tenant", path)
	}
	for _, c := range decl.Classes() {
		if all := node.Workers.Of(c); all >= 1 && all <= MaxWorkers { // else reported at limits.workers
			ch.share(path+".workers_per_tenant."+string(c), own.WorkersPerTenant.Of(c), node.Workers, c, true)
		}
	}
}

func (ch *checker) add(path, format string, args ...any) {
	ch.errs = append(ch.errs, &Error{Path: path, Reason: fmt.Sprintf(format, args...)})
}

func (ch *checker) name(path, what, name string) bool {
	if namePattern.MatchString(name) {
		return true
	}
	ch.add(path, "%q is not a valid %s name (%s)", name, what, nameRule)
	return false
}

func (ch *checker) oneOf(path, got string, allowEmpty bool, valid ...string) {
	if (allowEmpty && got == "") || slices.Contains(valid, got) {
		return
	}
	ch.add(path, "%q is not one of %s", got, strings.Join(valid, ", "))
}

func (ch *checker) httpURL(path, raw string) {
	if raw == "" {
		return
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		ch.add(path, "%q is not an http or https URL (write a full URL such as \"https://search.example.com/v1\")", raw)
	}
}

func (c Config) validate() []*Error {
	ch := &checker{}

	for _, f := range []struct {
		name, what string
		v          int
	}{
		{"tool_calls", "runs calls one at a time", c.Concurrency.ToolCalls},
		{"delegations", "runs delegations one at a time", c.Concurrency.Delegations},
		{"mcp_connections", "opens one MCP connection at a time", c.Concurrency.MCPConnections},
		{"lsp_requests", "sends LSP requests one at a time", c.Concurrency.LSPRequests},
	} {
		if f.v < 1 || f.v > MaxConcurrency {
			ch.add("concurrency."+f.name, "%d is out of range 1..%d (set a value from 1 to %d; 1 %s)", f.v, MaxConcurrency, MaxConcurrency, f.what)
		}
	}

	for _, name := range slices.Sorted(maps.Keys(c.Tools)) {
		ch.name(joinKey("tools", name), "tool", name)
	}

	ruleIDs := map[string]string{} // rule id → path of the rule that has it
	ch.rules("permission.rules", c.Permission.Rules, ruleIDs)
	if c.Permission.ApprovalTimeout < 0 {
		ch.add("permission.approval_timeout", "%s is negative (use 0 to wait without limit)", c.Permission.ApprovalTimeout)
	}

	for _, name := range slices.Sorted(maps.Keys(c.Agents)) {
		p := joinKey("agents", name)
		a := c.Agents[name]
		ch.name(p, "agent", name)
		ch.oneOf(p+".mode", a.Mode, true, ModeDefault, ModePlan)
		seen := map[string]int{}
		for i, tool := range a.Tools {
			tp := p + ".tools[" + strconv.Itoa(i) + "]"
			if !ch.name(tp, "tool", tool) {
				continue
			}
			if j, dup := seen[tool]; dup {
				ch.add(tp, "%q is listed twice (also at tools[%d]); list each tool once", tool, j)
				continue
			}
			seen[tool] = i
		}
		ch.rules(p+".rules", a.Rules, ruleIDs)
	}

	if b := c.ToolOutput.MaxBytes; b < 1 || b > MaxMaxBytes {
		ch.add("tool_output.max_bytes", "%d is out of range 1..%d (set a size in bytes up to 256 KiB, which keeps a result within one log message; the default is %d)", b, MaxMaxBytes, DefaultMaxBytes)
	}
	if n := c.ToolOutput.MaxLines; n < 1 {
		ch.add("tool_output.max_lines", "%d is out of range (set at least 1 line; the default is %d)", n, DefaultMaxLines)
	}

	ch.oneOf("durability", c.Durability, false, DurabilityFsync, DurabilityInterval)
	if c.Replicas < 0 || c.Replicas > 5 {
		ch.add("replicas", "%d is out of range 0..5 (0 picks 3 on a cluster of 3 or more servers, else 1)", c.Replicas)
	}
	if ttl := c.Fleet.LeaseTTL.Std(); ttl < 2*time.Second || ttl > time.Minute {
		ch.add("fleet.lease_ttl", "%s is out of range 2s..60s (the default is %s)", c.Fleet.LeaseTTL, Duration(DefaultLeaseTTL))
	}

	r := c.Retry
	if r.InitialDelay <= 0 {
		ch.add("retry.initial_delay", "%s is not positive (set a wait such as %q)", r.InitialDelay, Duration(DefaultInitialDelay))
	}
	if math.IsNaN(r.Factor) || math.IsInf(r.Factor, 0) || r.Factor < 1 {
		ch.add("retry.factor", "%v is out of range (set a factor of at least 1; 1 waits the same each time)", r.Factor)
	}
	if r.MaxDelay < r.InitialDelay {
		ch.add("retry.max_delay", "%s is shorter than retry.initial_delay %s (set it to at least the initial delay)", r.MaxDelay, r.InitialDelay)
	}
	if r.MaxAttempts < 1 || r.MaxAttempts > MaxMaxAttempts {
		ch.add("retry.max_attempts", "%d is out of range 1..%d (attempts include the first; 1 never retries)", r.MaxAttempts, MaxMaxAttempts)
	}

	if c.Timeouts.Default <= 0 {
		ch.add("timeouts.default", "%s is not positive (set a timeout such as %q)", c.Timeouts.Default, Duration(DefaultTimeout))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Timeouts.Tools)) {
		p := joinKey("timeouts.tools", name)
		if ch.name(p, "tool", name) && c.Timeouts.Tools[name] <= 0 {
			ch.add(p, "%s is not positive (set a timeout such as \"30s\", or leave the tool out to keep its own)", c.Timeouts.Tools[name])
		}
	}

	names := map[string]int{}
	for i, t := range c.CommandTools {
		p := "command_tools[" + strconv.Itoa(i) + "]"
		if ch.name(p+".name", "tool", t.Name) {
			if j, dup := names[t.Name]; dup {
				ch.add(p+".name", "%q is already the name of command_tools[%d] (tool names are unique)", t.Name, j)
			} else {
				names[t.Name] = i
			}
		}
		ch.commandTool(p, t)
	}

	ch.tenants("tenants", c.Tenants, c.Limits, c.ToolOutput.MaxBytes)
	if c.TenantsFile != "" {
		switch {
		case len(c.Tenants) > 0:
			ch.add("tenants_file", "given with \"tenants\": keep the tenants in one place (the file, to rotate tokens without a restart)")
		case strings.TrimSpace(c.TenantsFile) == "":
			ch.add("tenants_file", "empty: name the file holding {\"tenants\": {...}}, or leave tenants_file out")
		}
	}

	ch.oneOf("shell.sandbox", c.Shell.Sandbox, false, SandboxLandlock, SandboxOff, SandboxOn)
	ch.sandbox(c)

	for i, h := range c.Web.AllowHosts {
		if !validHost(h) {
			ch.add("web.allow_hosts["+strconv.Itoa(i)+"]", "%q is not a host name (write the host only, such as \"example.com\" or \"*.example.com\")", h)
		}
	}
	ch.httpURL("web.search_endpoint", c.Web.SearchEndpoint)

	for i, d := range c.Skills.Dirs {
		if strings.TrimSpace(d) == "" {
			ch.add("skills.dirs["+strconv.Itoa(i)+"]", "empty directory (remove it or name a directory)")
		}
	}

	ch.oneOf("guidance.placement", c.Guidance.Placement, false, PlacementSystem, PlacementDescription)
	if c.Guidance.Budget < 0 {
		ch.add("guidance.budget", "%d is negative (use 0 for no budget)", c.Guidance.Budget)
	}

	ch.httpURL("delegate.endpoint", c.Delegate.Endpoint)
	ch.limits(c.Limits, c.ToolOutput.MaxBytes)
	ch.workers(c.Limits, c.MultiTenant())
	hookNames := map[string]bool{}
	for _, kind := range []string{"before_tool", "middleware", "after_tool"} {
		hooks := map[string][]Hook{"before_tool": c.Hooks.BeforeTool, "middleware": c.Hooks.Middleware, "after_tool": c.Hooks.AfterTool}[kind]
		for i, h := range hooks {
			p := fmt.Sprintf("hooks.%s[%d]", kind, i)
			if ch.name(p+".name", "hook", h.Name) {
				if hookNames[h.Name] {
					ch.add(p+".name", "hook name %q is used twice; give each hook its own name", h.Name)
				}
				hookNames[h.Name] = true
			}
			if len(h.Command) == 0 || h.Command[0] == "" {
				ch.add(p+".command", "is empty: give the program and its arguments, e.g. [\"/usr/local/bin/audit\", \"--json\"]")
			}
			if h.Timeout < 0 {
				ch.add(p+".timeout", "%s is negative", h.Timeout)
			}
		}
	}

	if d := c.Turns.StreamTimeout.Std(); d < MinStreamTimeout || d > MaxStreamTimeout {
		ch.add("turns.stream_timeout", "%s is out of range %s..%s (how long a streamed turn stays open without a batch; the default is %s)",
			c.Turns.StreamTimeout, Duration(MinStreamTimeout), Duration(MaxStreamTimeout), Duration(DefaultStreamTimeout))
	}
	if n := c.EventStreams.MaxPerTenant; n < 1 || n > MaxMaxStreamsPerTenant {
		ch.add("event_streams.max_per_tenant", "%d is out of range 1..%d (live event streams one tenant may hold on a node)", n, MaxMaxStreamsPerTenant)
	}

	for _, name := range slices.Sorted(maps.Keys(c.MCPServers)) {
		ch.mcpServer(joinKey("mcp_servers", name), name, c.MCPServers[name])
	}
	ch.http(c.HTTP, c.MultiTenant())

	return ch.errs
}

// http checks the http section: allowed hosts only with tenants, each a
// host name or address with an optional port; the count and timeouts in
// range.
func (ch *checker) http(h HTTP, tenants bool) {
	if len(h.AllowedHosts) > 0 && !tenants {
		ch.add("http.allowed_hosts", "a node without tenants answers loopback names only (localhost, 127.0.0.1, [::1]), so it takes no list; configure \"tenants\" to serve other names")
	}
	for i, host := range h.AllowedHosts {
		if err := CheckAllowedHost(host); err != nil {
			ch.add(fmt.Sprintf("http.allowed_hosts[%d]", i), "%v", err)
		}
	}
	if n := h.MaxConnections; n < 1 || n > MaxMaxConnections {
		ch.add("http.max_connections", "%d is out of range 1..%d (connections the API holds open at once; the default is %d)", n, MaxMaxConnections, DefaultMaxConnections)
	}
	for _, f := range []struct {
		key string
		v   Duration
		def time.Duration
	}{{"idle_timeout", h.IdleTimeout, DefaultIdleTimeout}, {"body_timeout", h.BodyTimeout, DefaultBodyTimeout}} {
		if f.v.Std() < MinHTTPTimeout || f.v.Std() > MaxHTTPTimeout {
			ch.add("http."+f.key, "%s is out of range %s..%s (the default is %s)", f.v, MinHTTPTimeout, MaxHTTPTimeout, f.def)
		}
	}
}

// hostLabel is one label of a host name: letters, digits and '-', not at
// either end.
var hostLabel = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// CheckAllowedHost reports what is wrong with an http.allowed_hosts entry:
// a host name ("api.example.com"), a wildcard for its subdomains
// ("*.example.com") or an IP address, optionally with ":PORT" (an IPv6
// address then in brackets). It returns nil for a good entry.
func CheckAllowedHost(entry string) error {
	const form = `want a host name such as "api.example.com", "*.example.com" or "api.example.com:7700"`
	if strings.Contains(entry, "://") || strings.ContainsAny(entry, "/?#@ ") {
		return fmt.Errorf("%q is not a host: %s (no scheme, path or user)", entry, form)
	}
	host, port := entry, ""
	if h, p, err := net.SplitHostPort(entry); err == nil {
		host, port = h, p
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q has port %q: use a number from 1 to 65535", entry, port)
		}
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	name := strings.TrimSuffix(strings.TrimPrefix(host, "*."), ".")
	if name == "" || len(name) > 253 {
		return fmt.Errorf("%q is not a host: %s", entry, form)
	}
	for _, label := range strings.Split(name, ".") {
		if !hostLabel.MatchString(label) {
			return fmt.Errorf("%q is not a host: label %q %s; %s", entry, label, "is not letters, digits and '-'", form)
		}
	}
	return nil
}

// sandbox checks the sandbox section, and that shell.network (its older
// spelling for shell) does not contradict it.
func (ch *checker) sandbox(c Config) {
	sb := c.Sandbox
	ch.oneOf("sandbox.network", sb.Network, true, SandboxNetworkNone, SandboxNetworkHost)
	if c.Shell.Network && sb.Network == SandboxNetworkNone {
		ch.add("shell.network", `true contradicts sandbox.network "none": shell.network is the older spelling of sandbox.network "host"; remove it and set sandbox.network`)
	}
	for _, f := range []struct {
		path string
		v    int
	}{{"sandbox.uid", sb.UID}, {"sandbox.gid", sb.GID}} {
		if f.v < 0 || f.v > 1<<31-2 {
			ch.add(f.path, "%d is out of range 1..2147483646 (0, the default, gives each tenant an id of its own from sandbox.uids); it is the id every tenant's sandboxed commands run as on a root node", f.v)
		}
	}
	if r := sb.UIDs; r != (SandboxIDs{}) {
		switch {
		case r.First < 1 || r.First > 1<<31-2:
			ch.add("sandbox.uids.first", "%d is out of range 1..2147483646 (the first uid of the range tenants' sandboxed commands run as)", r.First)
		case r.Count < 1 || r.First+r.Count-1 > 1<<31-2:
			ch.add("sandbox.uids.count", "%d does not fit: the range starts at %d and must end by 2147483646 (and hold at least one id)", r.Count, r.First)
		}
	}
	ch.oneOf("sandbox.cgroups", sb.Cgroups, true, SandboxCgroupsAuto, SandboxCgroupsOff)
	for i, p := range sb.ReadOnly {
		if !strings.HasPrefix(p, "/") || path.Clean(p) == "/" {
			ch.add("sandbox.read_only["+strconv.Itoa(i)+"]", "%q is not an absolute path below / (name a directory or file such as \"/opt/toolchain\")", p)
		}
	}
	l := sb.Limits
	for _, f := range []struct {
		path string
		v    int64
	}{{"sandbox.limits.processes", int64(l.Processes)}, {"sandbox.limits.file_size_mb", l.FileSizeMB}, {"sandbox.limits.memory_mb", l.MemoryMB}, {"sandbox.limits.cpu_seconds", int64(l.CPUSeconds)},
		{"sandbox.limits.sandbox_memory_mb", l.SandboxMemoryMB}, {"sandbox.limits.tenant_processes", int64(l.TenantProcesses)}, {"sandbox.limits.tenant_memory_mb", l.TenantMemoryMB},
		{"sandbox.limits.node_processes", int64(l.NodeProcesses)}, {"sandbox.limits.node_memory_mb", l.NodeMemoryMB}, {"sandbox.limits.tenant_disk_mb", l.TenantDiskMB}} {
		if f.v < 0 {
			ch.add(f.path, "%d is negative (set a positive limit, or 0 for the default)", f.v)
		}
	}
	if l.TenantDiskMB > 0 && l.TenantDiskMB < 4 {
		ch.add("sandbox.limits.tenant_disk_mb", "%d is below 4, the smallest disk mkfs.ext4 makes a usable file system of (0 for none)", l.TenantDiskMB)
	}
	for i, b := range sb.AcceptWeaker {
		ch.oneOf("sandbox.accept_weaker["+strconv.Itoa(i)+"]", b, false, SandboxBoundaries...)
	}
}

// mcpServerName is the form of an MCP server's name: it becomes the middle
// of mcp__NAME__TOOL, so it may not hold "__" (which separates the parts),
// and it stays short enough to leave room for the tool's name within 64.
var mcpServerName = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]|_[A-Za-z0-9-]){0,31}$`)

func (ch *checker) mcpServer(p, name string, s MCPServer) {
	if !mcpServerName.MatchString(name) {
		ch.add(p, "%q is not a valid MCP server name (use 1 to 32 letters, digits, '-' or single '_', starting with a letter or digit; it becomes the middle of mcp__NAME__TOOL)", name)
	}
	switch {
	case len(s.Command) == 0 && s.URL == "":
		ch.add(p, `neither "command" nor "url" is set (give ["program", "arg", ...] to start a server over stdio, or the http(s) URL of a streamable HTTP server)`)
	case len(s.Command) > 0 && s.URL != "":
		ch.add(p, `both "command" and "url" are set (a server is either a program the node starts or an HTTP endpoint; keep one)`)
	}
	if len(s.Command) > 0 && strings.TrimSpace(s.Command[0]) == "" {
		ch.add(p+".command[0]", "empty program (the first element names the program to run)")
	}
	for i, a := range s.Command {
		if strings.ContainsRune(a, 0) {
			ch.add(p+".command["+strconv.Itoa(i)+"]", "contains a NUL byte")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			ch.add(joinKey(p+".env", k), "%q is not a valid environment variable name (no '=' or NUL, not empty)", k)
		} else if strings.ContainsRune(s.Env[k], 0) {
			ch.add(joinKey(p+".env", k), "value contains a NUL byte")
		}
	}
	if s.URL != "" {
		ch.httpURL(p+".url", s.URL)
		if len(s.Env) > 0 {
			ch.add(p+".env", "is for a server the node starts (command), not an HTTP one (url); remove it")
		}
		if s.Cwd != "" {
			ch.add(p+".cwd", "is for a server the node starts (command), not an HTTP one (url); remove it")
		}
	}
	if s.Cwd != "" && strings.ContainsRune(s.Cwd, 0) {
		ch.add(p+".cwd", "contains a NUL byte")
	}
	if len(s.Headers) > 0 && s.URL == "" {
		ch.add(p+".headers", "are for an HTTP server (url), not one the node starts (command); remove them")
	}
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		if !headerName.MatchString(k) {
			ch.add(joinKey(p+".headers", k), "%q is not an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~ only)", k)
		} else if strings.ContainsAny(s.Headers[k], "\r\n\x00") {
			ch.add(joinKey(p+".headers", k), "value contains a line break or NUL byte")
		}
	}
	for _, tn := range slices.Sorted(maps.Keys(s.Tools)) {
		tp := joinKey(p+".tools", tn)
		if strings.TrimSpace(tn) == "" {
			ch.add(tp, "empty tool name (name the tool as the server lists it)")
		}
		o := s.Tools[tn]
		ch.oneOf(tp+".effect", o.Effect, true, decl.Names(decl.Effects())...)
		ch.oneOf(tp+".replay", o.Replay, true, decl.Names(decl.Replays())...)
		ch.oneOf(tp+".concurrency", o.Concurrency, true, decl.Names(decl.Classes())...)
		for i, l := range o.Labels {
			ch.oneOf(tp+".labels["+strconv.Itoa(i)+"]", l, false, "irreversible", "financial", "external", "affects_others")
		}
		if o.Timeout < 0 {
			ch.add(tp+".timeout", "%s is negative (use 0 for timeouts.default)", o.Timeout)
		}
	}
}

// headerName is an HTTP field name (RFC 9110 token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// rules checks permission rules; ids collects rule ids across the config.
func (ch *checker) rules(p string, rules []Rule, ids map[string]string) {
	for i, r := range rules {
		rp := p + "[" + strconv.Itoa(i) + "]"
		if r.ID != "" && ch.name(rp+".id", "rule", r.ID) {
			if other, dup := ids[r.ID]; dup {
				ch.add(rp+".id", "%q is already the id of %s (rule ids are unique across the config)", r.ID, other)
			} else {
				ids[r.ID] = rp
			}
		}
		switch {
		case r.Tool == "":
			ch.add(rp+".tool", "missing (name the tool the rule applies to, or \"*\" for every tool)")
		case strings.ContainsAny(r.Tool, "*?"):
			if strings.IndexFunc(r.Tool, notGlobNameRune) >= 0 {
				ch.add(rp+".tool", "%q is not a valid tool name pattern (%s, with * and ? as wildcards)", r.Tool, nameRule)
			}
		default:
			ch.name(rp+".tool", "tool", r.Tool)
		}
		switch r.Action {
		case ActionAllow, ActionAsk, ActionDeny:
		case "":
			ch.add(rp+".action", "missing (set allow, ask or deny)")
		default:
			ch.add(rp+".action", "%q is not one of allow, ask, deny", r.Action)
		}
	}
}

func (ch *checker) commandTool(p string, t CommandTool) {
	if strings.TrimSpace(t.Description) == "" {
		ch.add(p+".description", "missing (the model needs a description to use the tool)")
	}
	if !slices.ContainsFunc(t.Guidelines, func(g string) bool { return strings.TrimSpace(g) != "" }) {
		ch.add(p+".guidelines", "no non-empty guideline (say when the model should use the tool)")
	}
	switch {
	case len(t.InputSchema) == 0:
		ch.add(p+".input_schema", `missing (give a JSON Schema such as {"type": "object", "properties": {}})`)
	default:
		var schema map[string]json.RawMessage
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil || schema == nil {
			ch.add(p+".input_schema", "not a JSON object (give a JSON Schema whose type is \"object\")")
			break
		}
		var typ string
		if raw, ok := schema["type"]; !ok {
			ch.add(p+".input_schema.type", `missing (the arguments are an object: set "type": "object")`)
		} else if json.Unmarshal(raw, &typ) != nil || typ != "object" {
			ch.add(p+".input_schema.type", `%s is not "object" (a tool's arguments are always an object)`, raw)
		}
	}
	switch {
	case len(t.Command) == 0:
		ch.add(p+".command", `missing (give the program and its fixed arguments, such as ["./bin/tool", "--json"])`)
	case strings.TrimSpace(t.Command[0]) == "":
		ch.add(p+".command[0]", "empty program (the first element names the program to run)")
	}
	for i, a := range t.Command {
		if strings.ContainsRune(a, 0) {
			ch.add(p+".command["+strconv.Itoa(i)+"]", "contains a NUL byte")
		}
	}
	ch.oneOf(p+".effect", t.Effect, true, decl.Names(decl.Effects())...)
	ch.oneOf(p+".replay", t.Replay, true, decl.Names(decl.Replays())...)
	ch.oneOf(p+".concurrency", t.Concurrency, true, decl.Names(decl.Classes())...)
	for i, l := range t.Labels {
		ch.oneOf(p+".labels["+strconv.Itoa(i)+"]", l, false, "irreversible", "financial", "external", "affects_others")
	}
	if t.Timeout < 0 {
		ch.add(p+".timeout", "%s is negative (use 0 for timeouts.default)", t.Timeout)
	}
	if t.FleetCap < 0 || t.FleetCap > 10_000 {
		ch.add(p+".fleet_cap", "%d is out of range 0..10000 (the most calls of this tool running at once across the fleet; 0 for no cap)", t.FleetCap)
	}
	ch.oneOf(p+".fleet_cap_scope", t.FleetCapScope, true, "tenant", "fleet")
	if t.FleetCapScope != "" && t.FleetCap == 0 {
		ch.add(p+".fleet_cap_scope", "%q is set without a fleet_cap (set fleet_cap too, or drop the scope)", t.FleetCapScope)
	}
	if t.SelfConcurrency < 0 || t.SelfConcurrency > MaxConcurrency {
		ch.add(p+".self_concurrency", "%d is out of range 0..%d (0 or 1 runs one call of the tool at a time)", t.SelfConcurrency, MaxConcurrency)
	} else if t.SelfConcurrency >= 2 && decl.Class(t.Concurrency).OrStrictest() != decl.ClassExclusive {
		ch.add(p+".self_concurrency", "applies to exclusive tools only, and this one is %s (which overlaps other calls up to concurrency.tool_calls already): drop self_concurrency or make the tool exclusive", t.Concurrency)
	}
	for _, f := range []struct {
		name  string
		decls []string
	}{{"mutated_paths", t.MutatedPaths}, {"touched_paths", t.TouchedPaths}} {
		for i, d := range f.decls {
			if why := argPathProblem(d); why != "" {
				ch.add(p+"."+f.name+"["+strconv.Itoa(i)+"]", "%s", why)
			}
		}
	}
	if decl.Effect(t.Effect) == decl.EffectReadOnly {
		if len(t.MutatedPaths) > 0 {
			ch.add(p+".mutated_paths", "a read_only tool may not declare mutated paths (it would write them): declare a writing effect such as side_effecting, or drop mutated_paths")
		}
		if t.Escalation {
			ch.add(p+".escalation", "a read_only tool may not allow escalation (a tool that needs to leave the sandbox is not read-only): declare another effect, or drop escalation")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			ch.add(joinKey(p+".env", k), "%q is not a valid environment variable name (no '=' or NUL, not empty)", k)
		} else if strings.ContainsRune(t.Env[k], 0) {
			ch.add(joinKey(p+".env", k), "value contains a NUL byte")
		}
	}
}

// argPathProblem says what is wrong with a command tool's path declaration,
// or "" when it parses: an argument name, or a JSON pointer (RFC 6901)
// starting with '/'. Whether the schema has what it names is checked where
// the tool is built (tools.Command), which compiles the schema.
func argPathProblem(d string) string {
	switch {
	case d == "":
		return `empty (name an argument such as "path", or write a JSON pointer such as "/files/0/path")`
	case !strings.HasPrefix(d, "/"):
		if strings.Contains(d, "/") {
			return fmt.Sprintf("%q is neither an argument name (it holds '/') nor a JSON pointer (it does not start with '/'): write %q", d, "/"+d)
		}
		return ""
	}
	for i := 0; i < len(d); i++ {
		if d[i] == '~' && (i+1 == len(d) || (d[i+1] != '0' && d[i+1] != '1')) {
			return fmt.Sprintf("JSON pointer %q has a '~' not followed by 0 or 1 (write ~0 for '~' and ~1 for '/' in a name)", d)
		}
	}
	return ""
}

// notGlobNameRune reports a rune that may not appear in a tool name pattern.
func notGlobNameRune(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return false
	}
	return !strings.ContainsRune("_-*?", r)
}

// validHost accepts a host name, an optional leading "*." wildcard, and an
// optional port: no scheme, path, user or spaces.
func validHost(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || strings.ContainsAny(h, "/@?# \t\r\n*") || strings.Contains(h, "://") {
		return false
	}
	u, err := url.Parse("http://" + h)
	return err == nil && u.Host == h && u.Hostname() != ""
}

// workers checks limits.workers and limits.workers_per_tenant: every class
// 1..MaxWorkers workers, and a tenant's share at most all of them, below
// that when there are tenants to share them.
func (ch *checker) workers(l Limits, tenants bool) {
	def := DefaultWorkers()
	for _, c := range decl.Classes() {
		if all := l.Workers.Of(c); all < 1 || all > MaxWorkers {
			ch.add("limits.workers."+string(c), "%d is out of range 1..%d (the default is %d)", all, MaxWorkers, def.Of(c))
			continue
		}
		ch.share("limits.workers_per_tenant."+string(c), l.WorkersPerTenant.Of(c), l.Workers, c, tenants)
	}
}

// share checks a tenant's share per of class c's workers (node's), at
// path: 0 (half) or up to all of them, and below all of them when there
// are tenants to share them.
func (ch *checker) share(path string, per int, node Workers, c decl.Class, tenants bool) {
	all := node.Of(c)
	key, half := "limits.workers."+string(c), max(all/2, 1)
	switch {
	case per < 0:
		ch.add(path, "%d is negative (0, the default, is half of %s: %d)", per, key, half)
	case per > all:
		ch.add(path, "%d is more than %s (%d): a tenant can hold at most every worker; lower it, or leave it out for half (%d)", per, key, all, half)
	case tenants && all > 1 && per == all:
		ch.add(path, "%d is every worker of %s: one tenant could hold them all and make every other tenant's calls wait; lower it, or leave it out for half (%d)", per, key, half)
	}
}

// limits checks the limits section: every limit positive and in range, the
// output kept per call at least what a result shows, and the calls in flight
// per tenant at least one whole turn.
func (ch *checker) limits(l Limits, maxBytes int) {
	for _, f := range []struct {
		key       string
		v, lo, hi int
		unit      string
		def       int
	}{
		{"body_bytes", l.BodyBytes, 1 << 10, MaxBodyBytes, " bytes", DefaultBodyBytes},
		{"calls_per_turn", l.CallsPerTurn, 1, MaxCallsPerTurn, " calls", DefaultCallsPerTurn},
		{"output_bytes_per_call", l.OutputBytesPerCall, max(maxBytes, 1), math.MaxInt, " bytes (at least tool_output.max_bytes)", DefaultOutputBytesPerCall},
		{"output_bytes_per_tenant", l.OutputBytesPerTenant, 1, math.MaxInt, " bytes", DefaultOutputBytesPerTenant},
		{"sessions_per_tenant", l.SessionsPerTenant, 1, math.MaxInt, " open sessions", DefaultSessionsPerTenant},
		{"calls_in_flight_per_tenant", l.CallsInFlightPerTenant, 1, math.MaxInt, " calls", DefaultCallsInFlightPerTenant},
	} {
		switch {
		case f.v < f.lo:
			ch.add("limits."+f.key, "%d is below the minimum of %d%s (the default is %d)", f.v, f.lo, f.unit, f.def)
		case f.v > f.hi:
			ch.add("limits."+f.key, "%d is above the maximum of %d%s (the default is %d)", f.v, f.hi, f.unit, f.def)
		}
	}
	if l.CallsPerTurn >= 1 && l.CallsInFlightPerTenant >= 1 && l.CallsInFlightPerTenant < l.CallsPerTurn {
		ch.add("limits.calls_in_flight_per_tenant", "%d is below limits.calls_per_turn (%d): a turn of the largest size could never run; raise it to at least %d or lower calls_per_turn", l.CallsInFlightPerTenant, l.CallsPerTurn, l.CallsPerTurn)
	}
}
