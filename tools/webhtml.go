package tools

import (
	"html"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// This file turns HTML into readable text for webfetch, with the standard
// library only. It is a forgiving scanner, not an HTML5 parser: it reads
// tags, comments and text in order, drops what a reader does not see (head,
// scripts, styles, navigation), keeps the shape that carries meaning
// (headings, paragraph breaks, list items, table cells, preformatted text)
// and writes each link as "text (url)". Broken markup degrades the output,
// never the scanner: every input terminates in one pass.

// htmlDropped are elements whose whole content is left out.
var htmlDropped = map[string]bool{
	"head": true, "nav": true, "svg": true, "math": true, "template": true,
	"select": true, "datalist": true, "object": true, "canvas": true, "audio": true, "video": true,
}

// htmlRaw are elements whose content is not markup (the tokenizer skips to
// the matching end tag) and is left out.
var htmlRaw = map[string]bool{
	"script": true, "style": true, "title": true, "textarea": true, "xmp": true,
	"iframe": true, "noembed": true, "noframes": true, "noscript": true,
}

// htmlBlock are elements that start and end on their own line (1) or
// paragraph (2).
var htmlBlock = map[string]int{
	"p": 2, "div": 1, "section": 2, "article": 2, "main": 2, "header": 2, "footer": 2, "aside": 2,
	"blockquote": 2, "figure": 2, "figcaption": 1, "form": 1, "fieldset": 1, "address": 2,
	"details": 2, "summary": 1, "table": 2, "thead": 1, "tbody": 1, "tfoot": 1, "tr": 1, "caption": 1,
	"ul": 2, "ol": 2, "dl": 2, "dt": 1, "dd": 1, "li": 1, "pre": 2, "hr": 2, "body": 2, "center": 1,
	"h1": 2, "h2": 2, "h3": 2, "h4": 2, "h5": 2, "h6": 2,
}

// Bounds that keep a hostile page from costing more than linear time: how
// deep open dropped elements and links are tracked (deeper ones are
// ignored) and how far nested list items are indented.
const (
	maxHTMLDepth  = 64
	maxListIndent = 8
)

// htmlToText renders the HTML document src as text; relative links are
// resolved against base (may be nil). The result has no leading or trailing
// space, no run of more than one blank line, and is valid UTF-8 if src is.
func htmlToText(src string, base *url.URL) string {
	c := &htmlConv{base: base}
	c.scan(src)
	return strings.TrimSpace(c.w.b.String())
}

// htmlConv is the state of one conversion.
type htmlConv struct {
	base  *url.URL
	w     textWriter
	drop  []string // open dropped elements, innermost last
	lists []int    // open lists: -1 for ul, else the next number of an ol
	links []htmlLink
}

// htmlLink is an open <a>: its resolved target and where its text starts.
type htmlLink struct {
	href  string
	start int
}

// scan tokenizes s and feeds the converter.
func (c *htmlConv) scan(s string) {
	for len(s) > 0 {
		lt := strings.IndexByte(s, '<')
		if lt < 0 {
			c.text(s)
			return
		}
		c.text(s[:lt])
		s = s[lt:]
		switch {
		case strings.HasPrefix(s, "<!--"):
			end := strings.Index(s[4:], "-->")
			if end < 0 {
				return
			}
			s = s[4+end+3:]
		case strings.HasPrefix(s, "<![CDATA["):
			end := strings.Index(s, "]]>")
			if end < 0 {
				c.rawText(s[9:])
				return
			}
			c.rawText(s[9:end])
			s = s[end+3:]
		case len(s) > 1 && (s[1] == '!' || s[1] == '?'):
			end := strings.IndexByte(s, '>')
			if end < 0 {
				return
			}
			s = s[end+1:]
		case len(s) > 2 && s[1] == '/' && isASCIILetter(s[2]):
			name, _, _, n := parseHTMLTag(s[2:])
			c.endTag(name)
			s = s[2+n:]
		case len(s) > 1 && isASCIILetter(s[1]):
			name, attrs, selfClosing, n := parseHTMLTag(s[1:])
			s = s[1+n:]
			if htmlRaw[name] {
				// Skip to the matching end tag, whatever lies between.
				end := indexFold(s, "</"+name)
				if end < 0 {
					return
				}
				s = s[end:]
				continue
			}
			c.startTag(name, attrs, selfClosing)
		default:
			c.text("<")
			s = s[1:]
		}
	}
}

// text writes character data (entities decoded, whitespace collapsed
// outside pre).
func (c *htmlConv) text(s string) {
	if s == "" || len(c.drop) > 0 {
		return
	}
	c.w.write(html.UnescapeString(s))
}

// rawText writes character data as is (CDATA).
func (c *htmlConv) rawText(s string) {
	if len(c.drop) > 0 {
		return
	}
	c.w.write(s)
}

func (c *htmlConv) startTag(name string, attrs map[string]string, selfClosing bool) {
	if name == "body" {
		c.drop = c.drop[:0] // an unclosed head ends here
	}
	if len(c.drop) > 0 || htmlDropped[name] {
		if htmlDropped[name] && !selfClosing && len(c.drop) < maxHTMLDepth {
			c.drop = append(c.drop, name)
		}
		return
	}
	if n, ok := htmlBlock[name]; ok {
		c.w.breakLines(c.blockBreak(name, n))
	}
	switch name {
	case "h1", "h2", "h3", "h4", "h5", "h6":
		c.w.prefix(strings.Repeat("#", int(name[1]-'0')))
	case "ul":
		c.lists = append(c.lists, -1)
	case "ol":
		start := 1
		if n, err := strconv.Atoi(strings.TrimSpace(attrs["start"])); err == nil {
			start = n
		}
		c.lists = append(c.lists, start)
	case "li":
		depth := min(max(len(c.lists), 1), maxListIndent)
		marker := "-"
		if len(c.lists) > 0 && c.lists[len(c.lists)-1] >= 0 {
			marker = strconv.Itoa(c.lists[len(c.lists)-1]) + "."
			c.lists[len(c.lists)-1]++
		}
		c.w.prefix(strings.Repeat("  ", depth-1) + marker)
	case "dd":
		c.w.prefix(" ")
	case "br":
		c.w.lineBreak()
	case "hr":
		c.w.prefix("---")
		c.w.breakLines(2)
	case "pre":
		c.w.pre++
	case "td", "th":
		if !c.w.atLineStart() {
			c.w.prefix(" |")
		}
	case "img":
		if alt := strings.TrimSpace(attrs["alt"]); alt != "" {
			c.w.write(" [image: " + alt + "] ")
		}
	case "a":
		if selfClosing || len(c.links) >= maxHTMLDepth {
			return
		}
		c.w.flush()
		c.links = append(c.links, htmlLink{href: c.resolve(attrs["href"]), start: c.w.b.Len()})
	}
}

func (c *htmlConv) endTag(name string) {
	if len(c.drop) > 0 {
		if !htmlDropped[name] {
			return
		}
		// Close the innermost dropped element of that name, and any opened
		// inside it and left unclosed.
		for i := len(c.drop) - 1; i >= 0; i-- {
			if c.drop[i] == name {
				c.drop = c.drop[:i]
				break
			}
		}
		return
	}
	switch name {
	case "ul", "ol":
		if len(c.lists) > 0 {
			c.lists = c.lists[:len(c.lists)-1]
		}
	case "pre":
		if c.w.pre > 0 {
			c.w.pre--
		}
	case "a":
		if len(c.links) == 0 {
			break
		}
		l := c.links[len(c.links)-1]
		c.links = c.links[:len(c.links)-1]
		if l.href == "" {
			break
		}
		label := ""
		if l.start <= c.w.b.Len() {
			label = strings.TrimSpace(c.w.b.String()[l.start:])
		}
		switch label {
		case "":
			c.w.write(l.href)
		case l.href, strings.TrimPrefix(l.href, "mailto:"):
		default:
			c.w.write(" (" + l.href + ")")
		}
	}
	if n, ok := htmlBlock[name]; ok {
		c.w.breakLines(c.blockBreak(name, n))
	}
}

// blockBreak is the break around a block element: a list inside a list
// starts on the next line rather than a new paragraph.
func (c *htmlConv) blockBreak(name string, n int) int {
	if (name == "ul" || name == "ol") && len(c.lists) > 0 {
		return 1
	}
	return n
}

// resolve returns href as an absolute http(s) or mailto URL, or "" for a
// link not worth showing (empty, a fragment of this page, javascript:).
func (c *htmlConv) resolve(href string) string {
	href = strings.TrimSpace(href) // entities were decoded with the attributes
	if href == "" || strings.HasPrefix(href, "#") {
		return ""
	}
	u, err := url.Parse(href)
	if err != nil {
		return ""
	}
	if c.base != nil {
		u = c.base.ResolveReference(u)
	}
	switch u.Scheme {
	case "http", "https", "mailto":
		return u.String()
	}
	return ""
}

// parseHTMLTag parses a tag after its "<" or "</": its lower-case name, its
// attributes (names lower-case, values decoded; only the first of a repeated
// name), whether it ends in "/>", and how many bytes it spans including ">".
// An unterminated tag spans the rest of s.
func parseHTMLTag(s string) (name string, attrs map[string]string, selfClosing bool, n int) {
	i := 0
	for i < len(s) && !isHTMLSpace(s[i]) && s[i] != '>' && s[i] != '/' {
		i++
	}
	name = strings.ToLower(s[:i])
	for i < len(s) {
		for i < len(s) && (isHTMLSpace(s[i]) || s[i] == '/') {
			selfClosing = s[i] == '/'
			i++
		}
		if i >= len(s) {
			break
		}
		if s[i] == '>' {
			return name, attrs, selfClosing, i + 1
		}
		selfClosing = false
		start := i
		for i < len(s) && !isHTMLSpace(s[i]) && s[i] != '>' && s[i] != '/' && s[i] != '=' {
			i++
		}
		if i == start { // a stray "=": skip it
			i++
			continue
		}
		key := strings.ToLower(s[start:i])
		for i < len(s) && isHTMLSpace(s[i]) {
			i++
		}
		val := ""
		if i < len(s) && s[i] == '=' {
			i++
			for i < len(s) && isHTMLSpace(s[i]) {
				i++
			}
			if i < len(s) && (s[i] == '"' || s[i] == '\'') {
				q := s[i]
				end := strings.IndexByte(s[i+1:], q)
				if end < 0 {
					return name, attrs, false, len(s)
				}
				val = s[i+1 : i+1+end]
				i += end + 2
			} else {
				vs := i
				for i < len(s) && !isHTMLSpace(s[i]) && s[i] != '>' {
					i++
				}
				val = s[vs:i]
			}
		}
		if attrs == nil {
			attrs = map[string]string{}
		}
		if _, seen := attrs[key]; !seen {
			attrs[key] = html.UnescapeString(val)
		}
	}
	return name, attrs, selfClosing, len(s)
}

// textWriter builds the text: whitespace collapses to one space, and line
// breaks asked for between blocks merge (at most one blank line).
type textWriter struct {
	b      strings.Builder
	space  bool // a space is pending before the next word
	breaks int  // newlines pending before the next word (0..2)
	pre    int  // depth of open pre elements: whitespace kept
}

// write adds text: collapsed, or kept as is inside pre.
func (w *textWriter) write(s string) {
	if w.pre > 0 {
		s = strings.ReplaceAll(s, "\r\n", "\n")
		if s != "" {
			w.flush()
			w.b.WriteString(s)
		}
		return
	}
	for _, r := range s {
		if unicode.IsSpace(r) {
			w.space = true
			continue
		}
		w.flush()
		w.b.WriteRune(r)
	}
}

// flush writes the pending newlines or space before a word.
func (w *textWriter) flush() {
	switch {
	case w.b.Len() == 0:
	case w.breaks > 0:
		have := 0
		for s := w.b.String(); have < w.breaks && have < len(s) && s[len(s)-1-have] == '\n'; have++ {
		}
		for ; have < w.breaks; have++ {
			w.b.WriteByte('\n')
		}
	case w.space && !w.atLineStart():
		w.b.WriteByte(' ')
	}
	w.breaks, w.space = 0, false
}

// breakLines asks for the next word to start n lines down (1: a new line,
// 2: a new paragraph).
func (w *textWriter) breakLines(n int) {
	w.breaks = max(w.breaks, n)
	w.space = false
}

// lineBreak is <br>: one more newline, at most a blank line.
func (w *textWriter) lineBreak() {
	w.breaks = min(w.breaks+1, 2)
	w.space = false
}

// prefix writes a marker (a list bullet, a heading's hashes) followed by a
// space before the next word.
func (w *textWriter) prefix(s string) {
	w.flush()
	w.b.WriteString(s)
	w.space = true
}

// atLineStart reports whether the next character starts a line.
func (w *textWriter) atLineStart() bool {
	s := w.b.String()
	return len(s) == 0 || s[len(s)-1] == '\n' || w.breaks > 0
}

func isASCIILetter(b byte) bool { return b|0x20 >= 'a' && b|0x20 <= 'z' }

func isHTMLSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f'
}

// indexFold is strings.Index ignoring ASCII case in the needle's letters.
func indexFold(s, needle string) int {
	for i := 0; i+len(needle) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(needle)], needle) {
			return i
		}
	}
	return -1
}
