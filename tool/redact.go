package tool

import (
	"regexp"
	"strings"
	"unicode"
)

// Redacted replaces a secret that RedactError masks.
const Redacted = "[REDACTED]"

// A redaction finds a candidate with re and replaces it with repl, unless
// keep (given the submatches) says the candidate is ordinary text.
type redaction struct {
	re   *regexp.Regexp
	repl string
	keep func(m []string) bool
}

// redactions are applied in order. Each keeps the context that says what was
// masked (the key name, "Bearer ", the URL's user) and replaces the secret.
var redactions = []redaction{
	// Authorization: <scheme> <credentials>. Prose says "authorization:
	// denied for bob"; a credential looks like one.
	{regexp.MustCompile(`(?i)(\bauthorization["']?\s*[:=]\s*["']?)([A-Za-z]+\s+)?([^\s"',;]+)`), "${1}${2}" + Redacted,
		func(m []string) bool { return !secretish(m[3]) }},
	// Bearer <token>, anywhere ("bearer authentication" is English).
	{regexp.MustCompile(`(?i)(\bbearer\s+)([A-Za-z0-9\-._~+/]{8,}=*)`), "${1}" + Redacted,
		func(m []string) bool { return !secretish(m[2]) }},
	// key=value and "key": "value" where the key names a secret:
	// password=…, api_key: …, "client_secret": "…", AWS_SECRET_ACCESS_KEY=….
	{regexp.MustCompile(`(?i)([a-z0-9_.\-]*(?:password|passwd|secret|private[_-]?key|credentials?)["']?\s*([:=])\s*)("[^"]*"|'[^']*'|[^\s"',;&}]+)`), "${1}" + Redacted,
		keepKeyValue},
	// Tokens and keys need 8 characters, so that "unexpected token: '}'"
	// in a parser's message survives.
	{regexp.MustCompile(`(?i)([a-z0-9_.\-]*(?:token|api[_-]?key|apikey|access[_-]?key)["']?\s*([:=])\s*)("[^"]{8,}"|'[^']{8,}'|[^\s"',;&}\[]{8,})`), "${1}" + Redacted,
		keepKeyValue},
	// Credentials in a URL: scheme://user:password@host.
	{re: regexp.MustCompile(`(\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+:)[^/\s@]+@`), repl: "${1}" + Redacted + "@"},
	// AWS access key ids.
	{re: regexp.MustCompile(`\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b`), repl: Redacted},
	// OpenAI/Anthropic-style keys (sk-…, sk-ant-…, sk-proj-…).
	{re: regexp.MustCompile(`\bsk-[A-Za-z0-9_\-]{16,}`), repl: Redacted},
	// GitHub and Slack tokens.
	{re: regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abposr]-[A-Za-z0-9\-]{10,})`), repl: Redacted},
	// PEM private keys.
	{re: regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)`), repl: Redacted},
}

// keepKeyValue decides a key-value candidate (submatches: prefix, the
// separator, the value): a quoted value or one after "=" is a setting and
// is masked whatever it holds; after a colon, prose is the rule ("open
// secret: no such file", "password: permission denied"), so only a value
// that looks like a secret is masked (YAML's "password: s3cr3t").
func keepKeyValue(m []string) bool {
	v := m[3]
	if m[2] == "=" || strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "'") {
		return false
	}
	return !secretish(v)
}

// secretish reports whether a word looks like a credential rather than
// English: it holds a digit or a symbol (other than a hyphen between
// letters), mixes case past its first letter ("dXNlcjpw"), or is longer
// than English words get (21 letters or more). Trailing punctuation does
// not count.
func secretish(v string) bool {
	v = strings.TrimRight(v, `.,:;!?)]}'"`)
	if v == "" {
		return false
	}
	if len(v) >= 21 {
		return true
	}
	rs := []rune(v)
	upperLate, lower := false, false
	for i, r := range rs {
		switch {
		case unicode.IsDigit(r):
			return true
		case unicode.IsLower(r):
			lower = true
		case unicode.IsUpper(r):
			upperLate = upperLate || i > 0
		case unicode.IsLetter(r):
		case r == '-' && i > 0 && i < len(rs)-1 && unicode.IsLetter(rs[i-1]) && unicode.IsLetter(rs[i+1]):
		default:
			return true
		}
	}
	return upperLate && lower
}

// RedactError masks obvious secrets in an error message before the model
// sees it: Authorization header values, bearer tokens, values of keys that
// name a secret (password=…, api_key: …, "client_secret": "…", …TOKEN=…),
// passwords in URLs (scheme://user:…@host), AWS access key ids, sk-… API keys,
// GitHub and Slack tokens, and PEM private keys. Each is replaced by
// Redacted, keeping the key or scheme so the message still says what failed.
//
// Ordinary words are left alone: after "key:" (a colon, not "=", and no
// quotes), behind "Authorization:" or "Bearer", only a value that looks like
// a credential is masked (it holds a digit or a symbol, mixes case, or is
// longer than a word), so "open secret: no such file" stays as it is.
//
// It is a safety net for messages built from tool output, not a guarantee:
// a secret in no recognisable form passes through (so does a plain-word
// password after a colon, "password: letmein"). It is safe for concurrent
// use.
func RedactError(msg string) string {
	for _, r := range redactions {
		if r.keep == nil {
			msg = r.re.ReplaceAllString(msg, r.repl)
			continue
		}
		msg = r.re.ReplaceAllStringFunc(msg, func(match string) string {
			m := r.re.FindStringSubmatch(match)
			if m == nil || r.keep(m) {
				return match
			}
			return r.re.ReplaceAllString(match, r.repl)
		})
	}
	return msg
}
