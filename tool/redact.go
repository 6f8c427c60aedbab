package tool

import "regexp"

// Redacted replaces a secret that RedactError masks.
const Redacted = "[REDACTED]"

// redactions are applied in order. Each keeps the context that says what was
// masked (the key name, "Bearer ", the URL's user) and replaces the secret.
var redactions = []struct {
	re   *regexp.Regexp
	repl string
}{
	// Authorization: <scheme> <credentials>
	{regexp.MustCompile(`(?i)(\bauthorization["']?\s*[:=]\s*["']?)([A-Za-z]+\s+)?[^\s"',;]+`), "${1}${2}" + Redacted},
	// Bearer <token>, anywhere.
	{regexp.MustCompile(`(?i)(\bbearer\s+)[A-Za-z0-9\-._~+/]{8,}=*`), "${1}" + Redacted},
	// key=value and "key": "value" where the key names a secret:
	// password=…, api_key: …, "client_secret": "…", AWS_SECRET_ACCESS_KEY=….
	{regexp.MustCompile(`(?i)([a-z0-9_.\-]*(?:password|passwd|secret|private[_-]?key|credentials?)["']?\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s"',;&}]+)`), "${1}" + Redacted},
	// Tokens and keys need 8 characters, so that "unexpected token: '}'"
	// in a parser's message survives.
	{regexp.MustCompile(`(?i)([a-z0-9_.\-]*(?:token|api[_-]?key|apikey|access[_-]?key)["']?\s*[:=]\s*)("[^"]{8,}"|'[^']{8,}'|[^\s"',;&}\[]{8,})`), "${1}" + Redacted},
	// Credentials in a URL: scheme://user:password@host.
	{regexp.MustCompile(`(\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+:)[^/\s@]+@`), "${1}" + Redacted + "@"},
	// AWS access key ids.
	{regexp.MustCompile(`\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b`), Redacted},
	// OpenAI/Anthropic-style keys (sk-…, sk-ant-…, sk-proj-…).
	{regexp.MustCompile(`\bsk-[A-Za-z0-9_\-]{16,}`), Redacted},
	// GitHub and Slack tokens.
	{regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abposr]-[A-Za-z0-9\-]{10,})`), Redacted},
	// PEM private keys.
	{regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)`), Redacted},
}

// RedactError masks obvious secrets in an error message before the model
// sees it: Authorization header values, bearer tokens, values of keys that
// name a secret (password=…, api_key: …, "client_secret": "…", …TOKEN=…),
// passwords in URLs (scheme://user:…@host), AWS access key ids, sk-… API keys,
// GitHub and Slack tokens, and PEM private keys. Each is replaced by
// Redacted, keeping the key or scheme so the message still says what failed.
//
// It is a safety net for messages built from tool output, not a guarantee:
// a secret in no recognisable form passes through. It may also mask a
// harmless value that follows a word like "token:". It is safe for
// concurrent use.
func RedactError(msg string) string {
	for _, r := range redactions {
		msg = r.re.ReplaceAllString(msg, r.repl)
	}
	return msg
}
