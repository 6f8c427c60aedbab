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
