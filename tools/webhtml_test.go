package tools

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHTMLToText(t *testing.T) {
	base, _ := url.Parse("https://example.com/dir/page.html")
	tests := []struct {
		name, html, want string
	}{
		{name: "plain text", html: "just   some\n\ttext", want: "just some text"},
		{name: "paragraphs", html: "<p>one</p><p>two</p>three", want: "one\n\ntwo\n\nthree"},
		{name: "line breaks", html: "a<br>b<br/><br>c", want: "a\nb\n\nc"},
		{name: "headings", html: "<H1>Title</H1><h3 class=x>Part</h3>text", want: "# Title\n\n### Part\n\ntext"},
		{name: "ordered list", html: `<ol start="3"><li>c<li>d</ol>`, want: "3. c\n4. d"},
		{name: "nested lists", html: "<ul><li>a<ul><li>a1</li></ul></li><li>b</li></ul>after", want: "- a\n  - a1\n- b\n\nafter"},
		{name: "table", html: "<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>", want: "k | v\na | 1"},
		{name: "relative link", html: `<a href="../up?x=1&amp;y=2">up</a>`, want: "up (https://example.com/up?x=1&y=2)"},
		{name: "link text is url", html: `<a href="https://go.dev/">https://go.dev/</a>`, want: "https://go.dev/"},
		{name: "image link", html: `<a href="/i"><img src="x.png"></a>`, want: "https://example.com/i"},
		{name: "image alt", html: `see <img alt="a cat"> here`, want: "see [image: a cat] here"},
		{name: "fragment and javascript links", html: `<a href="#top">top</a> <a href="javascript:alert(1)">js</a>`, want: "top js"},
		{name: "mailto", html: `<a href="mailto:a@b.c">a@b.c</a> <a href="mailto:a@b.c">mail</a>`, want: "a@b.c mail (mailto:a@b.c)"},
		{name: "dropped elements", html: "<head><title>T</title><meta charset=utf-8></head><nav>menu</nav><svg><text>x</text></svg>body", want: "body"},
		{name: "unclosed head", html: "<head><link rel=x><body>text", want: "text"},
		{name: "scripts and styles", html: "a<script>if (a<b) { x = '</div>' }</script>b<STYLE>p{}</style>c", want: "abc"},
		{name: "unclosed script", html: "a<script>never closed", want: "a"},
		{name: "comments", html: "a<!-- <p>x</p> -->b<!--never", want: "ab"},
		{name: "doctype and pi", html: "<!DOCTYPE html><?xml version=1?>x", want: "x"},
		{name: "cdata", html: "<![CDATA[a <b> c]]>", want: "a <b> c"},
		{name: "entities", html: "&lt;tag&gt; &amp;amp; caf&eacute; &#8364; &nbsp;x", want: "<tag> &amp; café € x"},
		{name: "stray less-than", html: "1 < 2 and 3 <= 4", want: "1 < 2 and 3 <= 4"},
		{name: "pre", html: "<pre>\n  a\n    b\n</pre>after", want: "a\n    b\n\nafter"},
		{name: "quoted gt in attribute", html: `<a title="x > y" href="/q">q</a>`, want: "q (https://example.com/q)"},
		{name: "unterminated tag", html: `text<a href="/x`, want: "text"},
		{name: "inline spacing", html: "<span>a</span><span>b</span> <em>c</em>", want: "ab c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := htmlToText(tt.html, base); got != tt.want {
				t.Errorf("htmlToText(%q)=\n%q\nwant\n%q", tt.html, got, tt.want)
			}
		})
	}
}

func FuzzHTMLToText(f *testing.F) {
	for _, s := range []string{
		"<p>a</p>", "<ul><li>x<li>y</ul>", "<a href='/x'>y</a>", "<script>", "<!--", "<![CDATA[",
		"<pre> a </pre>", "<nav><nav></nav>", "<a href=\"\">", "&amp;&#x;&#99999999;", "<ol start=-5><li>",
		"<table><td>a<td>b", "<a/><a></a></a>", "<br/><hr>",
	} {
		f.Add(s)
	}
	base, _ := url.Parse("https://example.com/")
	f.Fuzz(func(t *testing.T, s string) {
		got := htmlToText(s, base)
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("htmlToText(%q) is not valid UTF-8: %q", s, got)
		}
		if got != strings.TrimSpace(got) {
			t.Fatalf("htmlToText(%q)=%q has surrounding space", s, got)
		}
		if strings.Contains(got, "\n\n\n") && !strings.Contains(s, "\n\n") {
			t.Fatalf("htmlToText(%q)=%q has more than one blank line in a row", s, got)
		}
	})
}
