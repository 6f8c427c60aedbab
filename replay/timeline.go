package replay

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// The timeline page (docs/audit.md): one self-contained HTML document that
// draws each turn of a session as lanes of its calls on a time axis. It
// needs no network: the CSS, the script and the drawing (SVG) are inline,
// with no font, image or script from anywhere else, and its
// Content-Security-Policy allows nothing but its own style sheet and script,
// named by their SHA-256. Everything from the log is escaped by html/template:
// arguments and results are model output and may be hostile.
//
// A live page (TimelineStart, then TimelineUpdate chunks, then TimelineEnd)
// is the same document left open: each update is a <template> holding the
// new header or turn, followed by a marker element; the page's script swaps
// the template in when the marker arrives. No update carries a script, so
// the policy stays the two hashes, and the bytes stay a pure function of the
// events.

//go:embed timeline.tmpl timeline.css timeline.js
var timelineFiles embed.FS

var (
	timelineTmpl = template.Must(template.New("timeline.tmpl").Funcs(template.FuncMap{
		"f1": func(v float64) string { return fmt.Sprintf("%.1f", v) },
	}).ParseFS(timelineFiles, "timeline.tmpl"))
	timelineCSS = mustRead("timeline.css")
	timelineJS  = mustRead("timeline.js")
	// The page's policy: nothing from anywhere, except its one style sheet
	// and its one script, named by hash; no plugins, forms, base URL or
	// framing. Trusted Types forbid string-to-DOM sinks even to our script.
	timelinePolicy = "default-src 'none'; " +
		"style-src '" + hash(timelineCSS) + "'; " +
		"script-src '" + hash(timelineJS) + "'; " +
		"base-uri 'none'; form-action 'none'; " +
		"require-trusted-types-for 'script'; trusted-types 'none'"
)

func mustRead(name string) string {
	b, err := timelineFiles.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256-" + base64.StdEncoding.EncodeToString(h[:])
}

// TimelinePolicy is the Content-Security-Policy header a server sends with
// the timeline page: the policy the page also carries in a meta element,
// plus frame-ancestors 'none' (which a meta element cannot set).
func TimelinePolicy() string { return timelinePolicy + "; frame-ancestors 'none'" }

// Timeline renders a session's audit model as the complete timeline page.
// It is pure: the same model gives the same bytes.
func Timeline(a projections.Audit) []byte {
	b := page(a, false)
	b.WriteString(pageEnd)
	return b.Bytes()
}

// TimelineStart renders the live page so far: the page Timeline renders,
// marked live and left open, for TimelineUpdate chunks to follow.
func TimelineStart(a projections.Audit) []byte { return page(a, true).Bytes() }

// TimelineUpdate renders the chunk that brings a live page up to a: the
// header, and the turns at the positions given (AuditFolder.Changes), a
// turn the page does not have yet being added at the end.
func TimelineUpdate(a projections.Audit, turns []int) []byte {
	var b bytes.Buffer
	swap(&b, "head", "cs-head", headOf(a, true))
	for _, i := range turns {
		if i >= 0 && i < len(a.Turns) {
			swap(&b, "turn", turnID(i), turnOf(a.Session, &a.Turns[i], i))
		}
	}
	return b.Bytes()
}

// TimelineEnd renders the chunk that ends a live page: its final header
// and the closing tags.
func TimelineEnd(a projections.Audit) []byte {
	var b bytes.Buffer
	swap(&b, "head", "cs-head", headOf(a, false))
	b.WriteString(pageEnd)
	return b.Bytes()
}

// TimelineKeepAlive is a chunk a live page can be sent while nothing
// happens, so that proxies keep the connection: a comment.
const TimelineKeepAlive = "<!-- keep-alive -->\n"

const pageEnd = "</body>\n</html>\n"

func page(a projections.Audit, live bool) *bytes.Buffer {
	v := pageView{
		Policy:  timelinePolicy,
		CSS:     template.CSS(timelineCSS),
		JS:      template.JS(timelineJS),
		Session: a.Session,
		Head:    headOf(a, live),
		Legend:  legend(),
	}
	for i := range a.Turns {
		v.Turns = append(v.Turns, turnOf(a.Session, &a.Turns[i], i))
	}
	var b bytes.Buffer
	execute(&b, "page", v)
	return &b
}

// swap writes one live update: a template holding the new element, then
// the marker whose arrival tells the page's script the template is whole.
func swap(b *bytes.Buffer, name, id string, v any) {
	fmt.Fprintf(b, "<template data-cs-swap=\"%s\">", id) // id is ours: cs-head or cs-turn-N
	execute(b, name, v)
	b.WriteString("</template><i data-cs-done></i>\n")
}

func execute(b *bytes.Buffer, name string, v any) {
	if err := timelineTmpl.ExecuteTemplate(b, name, v); err != nil {
		// The views are built here and always match the template: a
		// failure is a programming error.
		panic(fmt.Sprintf("replay: timeline template %s: %v", name, err))
	}
}

// The views the template draws. Every string in them is escaped by the
// template; classes and ids are ours, never from the log.

type pageView struct {
	Policy  string
	CSS     template.CSS
	JS      template.JS
	Session string
	Head    headView
	Legend  svgView
	Turns   []turnView
}

type headView struct {
	Session string
	Live    bool
	Status  string
	Facts   []fact
}

type turnView struct {
	ID      string
	Turn    string
	Status  string
	Facts   string
	Notices []string
	Marks   []string
	SVG     svgView
	Calls   []callView
}

type svgView struct {
	W, H  float64
	Ticks []tickView
	Lanes []laneView
	// Marks are drawn on the axis: notices and the turn's own marks.
	Marks []shape
}

type tickView struct {
	X     float64
	Label string
}

type laneView struct {
	Anchor  string // the id of the call's details
	Y, H    float64
	Alt     bool
	Title   string
	Label   string
	Sub     string
	Caption string
	Class   string // the lane's outcome class, for its label's swatch
	Shapes  []shape
	Texts   []textView
}

// shape is one SVG element: a rect (W > 0), a line (Line), or a path (D).
type shape struct {
	X, Y, W, H     float64
	X2, Y2         float64
	Line           bool
	D              string
	Class, Title   string
	AttemptOutcome string
}

type textView struct {
	X, Y  float64
	Class string
	Text  string
}

type callView struct {
	Anchor    string
	Index     int
	Name      string
	ID        string
	State     string
	Class     string
	Facts     []fact
	Arguments string
	// Normalized is shown when it differs from what the model sent.
	Normalized string
	Result     []partView
	Outputs    []outputView
	Touched    string
	Truncated  string
	Attempts   int
	// ArgumentsCut, NormalizedCut and ResultCut say that only the first
	// bytes are shown, and how many there are; the links lead to the whole
	// (the API's routes, relative to the node that serves the page).
	ArgumentsCut, NormalizedCut, ResultCut    string
	ArgumentsLink, NormalizedLink, ResultLink string
}

type partView struct {
	Kind string // text, json or other
	Text string
}

type outputView struct {
	Attempt int
	Parts   []partView
}

func turnID(i int) string           { return fmt.Sprintf("cs-turn-%d", i) }
func callAnchor(turn, i int) string { return fmt.Sprintf("cs-c-%d-%d", turn, i) }

func headOf(a projections.Audit, live bool) headView {
	h := headView{Session: a.Session, Live: live, Facts: sessionFacts(a)}
	switch {
	case live:
		h.Status = fmt.Sprintf("live: this page follows the session (event %d so far)", a.Last.Seq)
	case a.Closed != nil:
		h.Status = fmt.Sprintf("final: the session is closed (last event %d)", a.Last.Seq)
	default:
		h.Status = fmt.Sprintf("as of event %d", a.Last.Seq)
	}
	return h
}

// Geometry of a turn's drawing, in SVG user units (the drawing scales to
// the page's width).
const (
	svgW     = 1100.0
	plotX0   = 300.0
	plotX1   = 1085.0
	axisH    = 30.0
	laneH    = 46.0
	barY     = 8.0  // the bar row's top, inside a lane
	barH     = 14.0 // the bar row's height
	minBar   = 2.0  // the narrowest bar drawn, so an instant still shows
	blockedW = 12.0 // a blocked call's mark
	capY     = 38.0 // the caption's baseline, inside a lane
	labelX   = 8.0
	titleMx  = 600 // longest arguments or result excerpt in a tooltip, in runes
)

// axis maps a turn's times onto the plot.
type axis struct {
	t0   time.Time
	span time.Duration
}

func axisOf(t *projections.AuditTurn) axis {
	end := t.End
	for _, c := range t.Calls {
		if ap := c.Approval; ap != nil && !ap.Decided.IsZero() && ap.Decided.Time.After(end) {
			end = ap.Decided.Time
		}
		for _, r := range c.Retries {
			if r.Due.After(end) {
				end = r.Due
			}
		}
	}
	span := end.Sub(t.Received.Time)
	if span <= 0 {
		span = time.Millisecond
	}
	return axis{t0: t.Received.Time, span: span}
}

func (ax axis) x(t time.Time) float64 {
	if t.IsZero() {
		return plotX0
	}
	f := float64(t.Sub(ax.t0)) / float64(ax.span)
	return plotX0 + math.Max(0, math.Min(1, f))*(plotX1-plotX0)
}

// ticks picks about six round offsets (1, 2 or 5 times a power of ten) along
// the axis.
func (ax axis) ticks() []tickView {
	step := niceStep(ax.span)
	var out []tickView
	for d := time.Duration(0); d <= ax.span; d += step {
		out = append(out, tickView{X: ax.x(ax.t0.Add(d)), Label: "+" + dur(d)})
	}
	return out
}

// niceStep is the smallest 1, 2 or 5 times a power of ten that cuts span
// into at most six steps.
func niceStep(span time.Duration) time.Duration {
	for p := time.Duration(1); p < math.MaxInt64/10; p *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if span/(p*m) <= 6 {
				return p * m
			}
		}
	}
	return span
}

func turnOf(session string, t *projections.AuditTurn, pos int) turnView {
	v := turnView{ID: turnID(pos), Turn: t.Turn, Status: t.Status, Facts: turnFacts(t)}
	ax := axisOf(t)
	v.SVG = svgView{W: svgW, H: axisH + laneH*float64(len(t.Calls)) + 6, Ticks: ax.ticks()}
	for _, n := range t.Notices {
		v.Notices = append(v.Notices, noticeText(t, n))
		v.SVG.Marks = append(v.SVG.Marks, shape{D: triangleDown(ax.x(n.Time), axisH-4), Class: "mk notice", Title: "retry notice: " + noticeText(t, n)})
	}
	for _, b := range t.Batches {
		v.SVG.Marks = append(v.SVG.Marks, shape{D: vbar(ax.x(b.Time), axisH-12, 12), Class: "arrive",
			Title: fmt.Sprintf("%s arrived at %s (seq %d)", plural(b.Calls, "call"), offset(t.Received.Time, b.Time), b.Seq)})
	}
	if e := t.Ended; e != nil {
		v.SVG.Marks = append(v.SVG.Marks, shape{D: vbar(ax.x(e.Time), axisH-14, 14), Class: "ended",
			Title: fmt.Sprintf("ended at %s (%s) with %s", offset(t.Received.Time, e.Time), e.Reason, plural(e.Calls, "call"))})
	}
	for _, m := range t.Marks {
		v.Marks = append(v.Marks, markText(t.Received.Time, m))
		v.SVG.Marks = append(v.SVG.Marks, shape{D: dot(ax.x(m.Time), axisH-8, 3), Class: "mk other", Title: markText(t.Received.Time, m)})
	}
	for i := range t.Calls {
		c := &t.Calls[i]
		v.SVG.Lanes = append(v.SVG.Lanes, laneOf(t, c, pos, ax, axisH+laneH*float64(i)))
		v.Calls = append(v.Calls, callViewOf(session, t, c, pos))
	}
	return v
}

// stateClass is the CSS class of a call's or attempt's state.
func stateClass(c *projections.AuditCall) string {
	if r := c.Result; r != nil {
		switch r.Outcome {
		case events.OutcomeOK, events.OutcomeError, events.OutcomeBlocked, events.OutcomeIndeterminate:
			return string(r.Outcome)
		}
		return "other"
	}
	switch {
	case c.Blocked != nil:
		return "blocked"
	case c.Approval.Pending():
		return "pending"
	}
	return "running"
}

func laneOf(t *projections.AuditTurn, c *projections.AuditCall, pos int, ax axis, y float64) laneView {
	base := t.Received.Time
	l := laneView{
		Anchor: callAnchor(pos, c.Index), Y: y, H: laneH, Alt: c.Index%2 == 1,
		Label: clip(fmt.Sprintf("%d. %s", c.Index+1, oneLine(c.Name)), 34),
		Sub:   clip(oneLine(c.ID), 40),
		Class: stateClass(c),
	}
	l.Title = laneTitle(c)
	by := y + barY
	mid := by + barH/2
	add := func(s shape) { l.Shapes = append(l.Shapes, s) }
	var caption []string
	switch {
	case c.Blocked != nil:
		caption = append(caption, "blocked: "+string(c.Blocked.Category))
	case c.Indeterminate != nil:
		caption = append(caption, "indeterminate: "+oneLine(c.Indeterminate.Reason))
	default:
		caption = append(caption, c.State())
	}

	// The approval wait: from the request to the decision (or to the end
	// of the axis while pending).
	if ap := c.Approval; ap != nil {
		x0 := ax.x(ap.Requested.Time)
		end := ap.Decided.Time
		class := "approval"
		if ap.Pending() {
			end, class = base.Add(ax.span), "approval pending"
		}
		add(shape{X: x0, Y: mid - 4, W: math.Max(minBar, ax.x(end)-x0), H: 8, Class: class, Title: "approval: " + approvalText(base, ap)})
		switch ap.Decision {
		case projections.DecisionAllow:
			add(shape{D: check(ax.x(end), mid), Class: "mk allow", Title: fmt.Sprintf("allowed by %s at %s", ap.By, when(ap.Decided.Time))})
			caption = append(caption, fmt.Sprintf("allowed by %s at %s", ap.By, clock(ap.Decided.Time)))
		case projections.DecisionDeny:
			add(shape{D: cross(ax.x(end), mid), Class: "mk deny", Title: fmt.Sprintf("denied by %s at %s", ap.By, when(ap.Decided.Time))})
			caption = append(caption, fmt.Sprintf("denied by %s at %s", ap.By, clock(ap.Decided.Time)))
		default:
			caption = append(caption, "awaiting approval since "+clock(ap.Requested.Time))
		}
	}
	if b := c.Blocked; b != nil {
		// A fixed small block, not a bar: nothing ran, for no time. The
		// commit mark shows when its result joined the others, in order.
		add(shape{X: ax.x(b.Time), Y: by, W: blockedW, H: barH, Class: "blocked", Title: fmt.Sprintf("blocked (%s): %s; nothing ran", b.Category, oneLine(b.Reason))})
	}
	if !c.Arrived.IsZero() {
		// A streamed call: it could not start before its batch arrived.
		add(shape{Line: true, X: ax.x(c.Arrived.Time), Y: by - 4, X2: ax.x(c.Arrived.Time), Y2: by + barH + 4, Class: "arrive",
			Title: fmt.Sprintf("arrived at %s (%s) while the model streamed", clock(c.Arrived.Time), offset(base, c.Arrived.Time))})
	}
	multi := len(c.Attempts) > 1
	for _, a := range c.Attempts {
		rq, st := a.Requested.Time, a.Started
		if st.IsZero() {
			st = rq
		}
		// Waiting for a worker: from the request to the start.
		if !rq.IsZero() {
			add(shape{Line: true, X: ax.x(rq), Y: mid, X2: ax.x(st), Y2: mid, Class: "queue", Title: fmt.Sprintf("attempt %d waited %s for a worker", a.Attempt, dur(a.Queued()))})
			add(shape{D: dot(ax.x(rq), mid, 3), Class: "mk req", Title: fmt.Sprintf("attempt %d requested at %s (%s)", a.Attempt, clock(rq), offset(base, rq))})
		}
		end, class := a.Ended.Time, a.Outcome
		if a.Ended.IsZero() {
			end, class = base.Add(ax.span), "running"
		}
		if !a.Started.IsZero() || !a.Ended.IsZero() {
			x0 := ax.x(st)
			add(shape{X: x0, Y: by, W: math.Max(minBar, ax.x(end)-x0), H: barH, Class: "run " + class, Title: fmt.Sprintf("attempt %d: %s", a.Attempt, attemptText(base, a))})
		}
		if !a.Claimed.IsZero() {
			add(shape{D: diamond(ax.x(a.Claimed.Time), by-2), Class: "mk claim", Title: fmt.Sprintf("attempt %d claimed by %s%s at %s (%s)", a.Attempt, a.Worker, takenBy(a), clock(a.Claimed.Time), offset(base, a.Claimed.Time))})
		}
		if !a.Ended.IsZero() {
			add(shape{Line: true, X: ax.x(end), Y: by - 2, X2: ax.x(end), Y2: by + barH + 2, Class: "end", Title: fmt.Sprintf("attempt %d ended at %s (%s): %s", a.Attempt, clock(end), offset(base, end), a.Outcome)})
		}
		if a.Truncated {
			add(shape{D: zigzag(ax.x(end)+2, by+barH+3), Class: "mk trunc", Title: "output cut to the caps: " + fullText(a.FullOutput)})
		}
		if multi {
			l.Texts = append(l.Texts, textView{X: ax.x(st) + 2, Y: by - 1, Class: "attempt", Text: fmt.Sprintf("#%d", a.Attempt)})
		}
		if a.Outcome == projections.AttemptIndeterminate {
			l.Texts = append(l.Texts, textView{X: ax.x(end) + 3, Y: by + barH - 2, Class: "qmark", Text: "?"})
		}
	}
	if multi {
		caption = append(caption, fmt.Sprintf("attempts %s", attemptNumbers(c)))
	} else if len(c.Attempts) == 1 && c.Attempts[0].DurationMS > 0 {
		caption = append(caption, "ran "+durMS(c.Attempts[0].DurationMS))
	}
	for _, r := range c.Retries {
		x0 := ax.x(r.Time)
		x1 := ax.x(r.Due)
		if r.Due.IsZero() {
			x1 = x0
		}
		add(shape{Line: true, X: x0, Y: mid + 3, X2: math.Max(x0+minBar, x1), Y2: mid + 3, Class: "retry", Title: fmt.Sprintf("retry: attempt %d after %s: %s", r.Attempt, dur(r.Delay), oneLine(r.Error))})
	}
	for _, k := range c.Checkpoints {
		add(shape{D: flagMark(ax.x(k.Time), by), Class: "mk ckpt", Title: fmt.Sprintf("checkpoint of %s at %s", k.Path, offset(base, k.Time))})
	}
	if len(c.Checkpoints) > 0 {
		caption = append(caption, plural(len(c.Checkpoints), "checkpoint"))
	}
	if r := c.Result; r != nil && r.Truncated {
		caption = append(caption, "truncated: "+fullText(r.FullOutput))
	}
	if x := c.Cancelled; x != nil {
		add(shape{D: cross(ax.x(x.Time), mid), Class: "mk cancel", Title: "cancelled: " + oneLine(x.Reason)})
		caption = append(caption, "cancelled")
	}
	for _, an := range c.Answers {
		add(shape{D: square(ax.x(an.Time), mid, 4), Class: "mk answer", Title: fmt.Sprintf("answered by %s at %s", an.By, offset(base, an.Time))})
	}
	for _, w := range c.WorkState {
		add(shape{D: square(ax.x(w.Time), by+barH+2, 3), Class: "mk state", Title: fmt.Sprintf("%s set at %s", w.Kind, offset(base, w.Time))})
	}
	if !c.Committed.IsZero() {
		add(shape{D: triangleUp(ax.x(c.Committed.Time), by+barH+6), Class: "mk commit", Title: fmt.Sprintf("committed at %s (%s)", clock(c.Committed.Time), offset(base, c.Committed.Time))})
	}
	for _, m := range c.Marks {
		add(shape{D: dot(ax.x(m.Time), by-3, 3), Class: "mk other", Title: markText(base, m)})
		caption = append(caption, string(m.Type))
	}
	l.Caption = clip(strings.Join(caption, " · "), 150)
	return l
}

// vbar is a vertical stroke of height h down from (x, y).
func vbar(x, y, h float64) string { return fmt.Sprintf("M%.1f %.1f v%.1f", x, y, h) }

func attemptNumbers(c *projections.AuditCall) string {
	var parts []string
	for _, a := range c.Attempts {
		s := fmt.Sprintf("#%d", a.Attempt)
		if a.Outcome != "" {
			s += " " + a.Outcome
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func fullText(f *events.OutputRef) string {
	if f == nil {
		return "the full output was not kept"
	}
	return fmt.Sprintf("full output %d bytes, %d lines", f.Bytes, f.Lines)
}

// laneTitle is the hover text of a call: what it is, its arguments and its
// result, cut to a tooltip's size (the details below hold everything).
func laneTitle(c *projections.AuditCall) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d. %s %s: %s\narguments: %s", c.Index+1, c.Name, c.ID, c.State(), clip(compactJSON(c.Arguments, titleMx), titleMx))
	if r := c.Result; r != nil {
		fmt.Fprintf(&b, "\nresult: %s", clip(partsText(r.Content), titleMx))
	}
	b.WriteString("\n(click for the details)")
	return b.String()
}

func partsText(ps []events.Part) string {
	var out []string
	for _, p := range ps {
		switch p.Type {
		case "text":
			out = append(out, p.Text)
		case "json":
			out = append(out, compactJSON(p.JSON, titleMx))
		default:
			out = append(out, fmt.Sprintf("[%s %s, %d bytes]", p.Type, p.MIME, len(p.Data)))
		}
	}
	return strings.Join(out, "\n")
}

func callViewOf(session string, t *projections.AuditTurn, c *projections.AuditCall, pos int) callView {
	v := callView{
		Anchor: callAnchor(pos, c.Index), Index: c.Index + 1, Name: c.Name, ID: c.ID,
		State: c.State(), Class: stateClass(c), Facts: callFacts(t, c),
		Arguments: prettyJSON(c.Arguments), Attempts: len(c.Attempts),
	}
	args := "/v1/sessions/" + url.PathEscape(session) + "/turns/" + url.PathEscape(t.Turn) + "/calls/" + url.PathEscape(c.ID) + "/arguments"
	if c.ArgumentsBytes > 0 {
		v.Arguments, v.ArgumentsCut, v.ArgumentsLink = clippedText(c.Arguments), cutNote(c.Arguments, c.ArgumentsBytes), args
	}
	if c.Normalized != nil {
		n := prettyJSON(c.Normalized)
		if c.NormalizedBytes > 0 {
			n = clippedText(c.Normalized)
		}
		if n != v.Arguments || c.NormalizedBytes != c.ArgumentsBytes {
			v.Normalized = n
			if c.NormalizedBytes > 0 {
				v.NormalizedCut, v.NormalizedLink = cutNote(c.Normalized, c.NormalizedBytes), args+"?as=run"
			}
		}
	}
	if r := c.Result; r != nil {
		v.Attempts = r.Attempts
		v.Result = partsOf(r.Content)
		if c.ResultBytes > 0 {
			v.ResultCut = fmt.Sprintf("each part cut to its first %d bytes, of %d in all", TimelineClip, c.ResultBytes)
			v.ResultLink = "/v1/sessions/" + url.PathEscape(session) + "/turns/" + url.PathEscape(t.Turn)
		}
		v.Touched = strings.Join(r.Touched, ", ")
		if r.Truncated {
			v.Truncated = fullText(r.FullOutput)
			if r.FullOutput != nil {
				v.Truncated += ", object " + r.FullOutput.Object
			}
		}
		for _, a := range c.Attempts {
			if a.Outcome == projections.AttemptOK && len(a.Content) > 0 && !sameParts(a.Content, r.Content) {
				v.Outputs = append(v.Outputs, outputView{Attempt: a.Attempt, Parts: partsOf(a.Content)})
			}
		}
	}
	return v
}

// TimelineClip is how many bytes of each call's arguments and of each part
// of its output the timeline page shows (and its audit fold keeps,
// NewTimelineFolder); the page links to the rest. A session's page is thus
// bounded by its number of calls, whatever their sizes.
const TimelineClip = 4096

// NewTimelineFolder returns the audit folder the timeline page is drawn
// from: it keeps TimelineClip bytes a value (projections.ClipAt).
func NewTimelineFolder(tenant, session string) *projections.AuditFolder {
	return projections.NewAuditFolder(tenant, session, projections.ClipAt(TimelineClip))
}

// clippedText is the text of a value the fold cut (a JSON string of its
// first bytes), marked as cut.
func clippedText(v json.RawMessage) string {
	var s string
	_ = json.Unmarshal(v, &s)
	return s + " …"
}

// cutNote says how much of a cut value is shown.
func cutNote(v json.RawMessage, whole int) string {
	var s string
	_ = json.Unmarshal(v, &s)
	return fmt.Sprintf("the first %d of %d bytes", len(s), whole)
}

func partsOf(ps []events.Part) []partView {
	var out []partView
	for _, p := range ps {
		switch p.Type {
		case "text":
			out = append(out, partView{Kind: "text", Text: p.Text})
		case "json":
			out = append(out, partView{Kind: "json", Text: prettyJSON(p.JSON)})
		default:
			// Images are not drawn: the page loads nothing, not even a
			// data: URL a model chose.
			out = append(out, partView{Kind: "other", Text: fmt.Sprintf("[%s %s, %d bytes]", p.Type, p.MIME, len(p.Data))})
		}
	}
	return out
}

// legend draws one of each mark with what it means, in rows.
func legend() svgView {
	type item struct {
		w    float64 // the mark's width
		mk   func(x, y float64) shape
		text string
	}
	bar := func(class string) func(x, y float64) shape {
		return func(x, y float64) shape { return shape{X: x, Y: y - barH/2, W: 24, H: barH, Class: class} }
	}
	line := func(class string) func(x, y float64) shape {
		return func(x, y float64) shape { return shape{Line: true, X: x, Y: y, X2: x + 24, Y2: y, Class: class} }
	}
	items := []item{
		{6, func(x, y float64) shape { return shape{D: dot(x+3, y, 3), Class: "mk req"} }, "requested"},
		{8, func(x, y float64) shape { return shape{D: diamond(x+4, y-4), Class: "mk claim"} }, "claimed by a node"},
		{2, func(x, y float64) shape {
			return shape{Line: true, X: x + 1, Y: y - 8, X2: x + 1, Y2: y + 8, Class: "arrive"}
		}, "arrived (streamed)"},
		{2, func(x, y float64) shape {
			return shape{Line: true, X: x + 1, Y: y - 8, X2: x + 1, Y2: y + 8, Class: "ended"}
		}, "streamed turn ended"},
		{24, line("queue"), "waiting for a worker"},
		{24, bar("run ok"), "ran: ok"},
		{24, bar("run error"), "error"},
		{24, bar("run indeterminate"), "indeterminate"},
		{24, bar("run running"), "running"},
		{24, bar("blocked"), "blocked (nothing ran)"},
		{24, func(x, y float64) shape { return shape{X: x, Y: y - 4, W: 24, H: 8, Class: "approval"} }, "awaiting approval"},
		{24, line("retry"), "retry delay"},
		{8, func(x, y float64) shape { return shape{D: check(x+4, y), Class: "mk allow"} }, "allowed"},
		{8, func(x, y float64) shape { return shape{D: cross(x+4, y), Class: "mk deny"} }, "denied or cancelled"},
		{8, func(x, y float64) shape { return shape{D: flagMark(x+1, y+5), Class: "mk ckpt"} }, "checkpoint"},
		{8, func(x, y float64) shape { return shape{D: zigzag(x, y), Class: "mk trunc"} }, "output truncated"},
		{8, func(x, y float64) shape { return shape{D: triangleUp(x+4, y), Class: "mk commit"} }, "committed"},
		{8, func(x, y float64) shape { return shape{D: triangleDown(x+4, y+3), Class: "mk notice"} }, "retry notice"},
		{8, func(x, y float64) shape { return shape{D: square(x+4, y, 4), Class: "mk answer"} }, "answer"},
		{6, func(x, y float64) shape { return shape{D: square(x+3, y, 3), Class: "mk state"} }, "work state"},
		{6, func(x, y float64) shape { return shape{D: dot(x+3, y, 3), Class: "mk other"} }, "other event"},
	}
	lane := laneView{}
	x, y := 8.0, 14.0
	for _, it := range items {
		adv := it.w + 6 + 6.2*float64(len(it.text)) + 22
		if x+adv > svgW {
			x, y = 8, y+22
		}
		lane.Shapes = append(lane.Shapes, it.mk(x, y))
		lane.Texts = append(lane.Texts, textView{X: x + it.w + 6, Y: y + 4, Class: "legend", Text: it.text})
		x += adv
	}
	return svgView{W: svgW, H: y + 12, Lanes: []laneView{lane}}
}

// Marks, as SVG path data centred on (x, y).

func dot(x, y, r float64) string {
	return fmt.Sprintf("M%.1f %.1f m-%.1f 0 a%.1f %.1f 0 1 0 %.1f 0 a%.1f %.1f 0 1 0 -%.1f 0", x, y, r, r, r, 2*r, r, r, 2*r)
}

func diamond(x, y float64) string {
	return fmt.Sprintf("M%.1f %.1f l4 4 l-4 4 l-4 -4 z", x, y-4)
}

func square(x, y, r float64) string {
	return fmt.Sprintf("M%.1f %.1f h%.1f v%.1f h-%.1f z", x-r, y-r, 2*r, 2*r, 2*r)
}

func triangleUp(x, y float64) string {
	return fmt.Sprintf("M%.1f %.1f l4 6 h-8 z", x, y-3)
}

func triangleDown(x, y float64) string {
	return fmt.Sprintf("M%.1f %.1f l-4 -6 h8 z", x, y)
}

func flagMark(x, y float64) string {
	return fmt.Sprintf("M%.1f %.1f v-9 l7 2.5 l-7 2.5", x, y)
}

func check(x, y float64) string {
	return fmt.Sprintf("M%.1f %.1f l3 4 l6 -8", x-4, y)
}

func cross(x, y float64) string {
	return fmt.Sprintf("M%.1f %.1f l8 8 m0 -8 l-8 8", x-4, y-4)
}

func zigzag(x, y float64) string {
	return fmt.Sprintf("M%.1f %.1f l2 -3 l2 3 l2 -3 l2 3", x, y+1)
}

// takenBy names the external worker that took an attempt, if one did.
func takenBy(a projections.Attempt) string {
	if a.ExternalWorker == "" {
		return ""
	}
	return " for worker " + a.ExternalWorker
}
