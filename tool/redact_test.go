package tool

import (
	"strings"
	"testing"
)

func TestRedactError(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   string   // exact output, when set
		gone   []string // substrings that must not survive
		intact []string // substrings that must survive
	}{
		{name: "bearer", in: "GET /x: 401 with Bearer eyJhbGciOiJIUzI1NiJ9.abc.def",
			want: "GET /x: 401 with Bearer [REDACTED]"},
		{name: "authorization header", in: `request failed: Authorization: Basic dXNlcjpwYXNz`,
			want: "request failed: Authorization: Basic [REDACTED]"},
		{name: "password pair", in: "connect: password=hunter2 host=db",
			want: "connect: password=[REDACTED] host=db"},
		{name: "json secret", in: `bad config {"client_secret": "abc def", "user": "bob"}`,
			want: `bad config {"client_secret": [REDACTED], "user": "bob"}`},
		{name: "env token", in: "env GITHUB_TOKEN=ghx0123456789abcdef set",
			want: "env GITHUB_TOKEN=[REDACTED] set"},
		{name: "api key colon", in: "x-api-key: 0123456789abcdef", gone: []string{"0123456789abcdef"}},
		{name: "aws access key", in: "AccessDenied for AKIAIOSFODNN7EXAMPLE on bucket",
			want: "AccessDenied for [REDACTED] on bucket"},
		{name: "aws secret", in: "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
			gone: []string{"wJalrXUtnFEMI"}},
		{name: "sk key", in: "openai: invalid key sk-proj-abcdefghijklmnop1234 given",
			want: "openai: invalid key [REDACTED] given"},
		{name: "github token", in: "push failed ghp_abcdefghijklmnopqrstuvwxyz0123456789",
			want: "push failed [REDACTED]"},
		{name: "url userinfo", in: "dial postgres://app:s3cr3t@db:5432/x failed",
			want: "dial postgres://app:[REDACTED]@db:5432/x failed"},
		{name: "private key", in: "key: -----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY----- end",
			gone: []string{"MIIE"}, intact: []string{" end"}},
		{name: "ordinary message untouched", in: "open a.go: no such file or directory",
			want: "open a.go: no such file or directory"},
		{name: "parser token survives", in: "line 3: unexpected token: '}'",
			want: "line 3: unexpected token: '}'"},
		{name: "max_tokens survives", in: "max_tokens=4096 exceeded",
			want: "max_tokens=4096 exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RedactError(tt.in)
			if tt.want != "" && got != tt.want {
				t.Fatalf("RedactError(%q)=%q, want %q", tt.in, got, tt.want)
			}
			for _, s := range tt.gone {
				if strings.Contains(got, s) {
					t.Fatalf("RedactError(%q)=%q still holds %q", tt.in, got, s)
				}
			}
			for _, s := range tt.intact {
				if !strings.Contains(got, s) {
					t.Fatalf("RedactError(%q)=%q lost %q", tt.in, got, s)
				}
			}
		})
	}
}

// ordinary is English that names secrets without holding any: error
// messages about files and settings called secret, password or token, and
// prose. RedactError must return each unchanged.
var ordinary = []string{
	"read secret: no such file or directory",
	"open config/secret: no such file or directory",
	"open credentials: permission denied",
	"stat password: not a directory",
	"read .password-store: is a directory",
	"token: expired",
	"the access token: unexpected end of input",
	"authorization: denied for user bob",
	"Authorization: missing",
	"bearer authentication is not enabled on this server",
	"Bearer tokens must be sent in the Authorization header",
	"secret: read-only file system",
	"Password: Too short.",
	"credentials: not found, run the login command first",
	"api key: required",
	"the secret is out, and the password is wrong",
	"private key: no such file",
	"unexpected token: '}' at line 3",
	"max_tokens=4096 exceeded",
}

func TestRedactLeavesOrdinaryEnglish(t *testing.T) {
	for _, s := range ordinary {
		if got := RedactError(s); got != s {
			t.Errorf("RedactError(%q) = %q, want it unchanged", s, got)
		}
	}
	// And still masks what looks like a credential after a colon.
	for in, want := range map[string]string{
		"password: hunter2":           "password: [REDACTED]",
		"secret: s3cr3t-value":        "secret: [REDACTED]",
		"db_password: Xk9pQ2mZ":       "db_password: [REDACTED]",
		"authorization: dXNlcjpwYXNz": "authorization: [REDACTED]",
	} {
		if got := RedactError(in); got != want {
			t.Errorf("RedactError(%q) = %q, want %q", in, got, want)
		}
	}
}

// words are English words, the ones that name secrets among them, in the
// cases prose uses.
var words = []string{
	"no", "such", "file", "or", "directory", "permission", "denied", "is", "a", "not", "found", "the", "of",
	"open", "read", "write", "expired", "invalid", "missing", "required", "empty", "unknown", "wrong",
	"password", "passwords", "secret", "secrets", "token", "tokens", "credentials", "credential",
	"authorization", "bearer", "authentication", "key", "api", "access", "private", "passwd",
	"internationalization", "read-only", "well-known", "user", "server", "failed", "because",
}

// FuzzRedactOrdinaryEnglish: any sentence of English words, in any case,
// joined by spaces, colons, commas and full stops, passes through
// RedactError unchanged.
func FuzzRedactOrdinaryEnglish(f *testing.F) {
	// Each byte picks a word (and its case); the byte before it, the
	// separator.
	for _, seed := range [][]byte{{23, 1, 0, 1, 2}, {25, 1, 18, 0}, {33, 1, 34, 35}, {34, 35, 29, 130, 24, 200},
		{30, 2, 1, 3, 27, 63, 21}, {36, 1, 40, 65, 23, 61, 42}, {27, 1, 19, 21}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s strings.Builder
		for i, c := range b {
			w := words[int(c)%len(words)]
			switch c / 64 { // the case prose uses: lower, Title, UPPER
			case 1:
				w = strings.ToUpper(w[:1]) + w[1:]
			case 2:
				w = strings.ToUpper(w)
			}
			if i > 0 {
				s.WriteString([]string{" ", ": ", ", ", ". "}[int(b[i-1])%4])
			}
			s.WriteString(w)
		}
		if got := RedactError(s.String()); got != s.String() {
			t.Fatalf("RedactError(%q) = %q, want it unchanged", s.String(), got)
		}
	})
}
