package timeline

import (
	"fmt"
	"html/template"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"stratum.dev/stratum/sim"
)

// Geometry of the drawing, in pixels.
const (
	labelW     = 150.0 // the column of lane and track names
	rightPad   = 130.0 // room for the failure's label after the end
	minPlotW   = 1100.0
	maxPlotW   = 8000.0
	pxPerSec   = 25.0 // for logs longer than minPlotW allows at that scale
	legendTop  = 10.0
	axisY      = 78.0
	lanesTop   = 88.0
	lanePad    = 6.0
	markRows   = 3
	markRowH   = 12.0
	trackH     = 9.0
	trackGap   = 3.0
	minTickPx  = 80.0
	minSpanW   = 2.0
	markSpacer = 10.0 // marks closer than this on one row move to the next
)

// track is one row of spans in a host's lane.
type track struct {
	kind, service, label string
}

// tracks are every span track, top to bottom; a drawing has those its spans
// use.
var tracks = []track{
	{SpanLeader, "", "etcd leader"},
	{SpanVIP, "", "VIP holder"},
	{SpanPartitioned, "", "partitioned"},
	{SpanCrashed, "", "crashed"},
	{SpanDown, serviceEtcd, "etcd down"},
	{SpanDown, serviceAPIServer, "apiserver down"},
}

// glyph is a mark's shape, a path around (0,0), by event kind.
var glyph = map[string]string{
	"fault":      "M0,-5L5,0L0,5L-5,0Z",
	"heal":       "M0,-5L5,0L0,5L-5,0Z",
	"crash":      "M-5,-5L5,5M5,-5L-5,5",
	"action":     "M-4,-4h8v8h-8Z",
	"checkpoint": "M-1.5,-6h3v12h-3Z",
	"error":      "M0,-5L5,4H-5Z",
	"client":     "M-4,0a4,4 0 1,0 8,0a4,4 0 1,0 -8,0Z",
}

// otherGlyph is the shape of any other kind's mark.
const otherGlyph = "M-3,0a3,3 0 1,0 6,0a3,3 0 1,0 -6,0Z"

// guided are the kinds whose marks also draw a faint line across every lane.
var guided = map[string]bool{"fault": true, "heal": true, "crash": true}

// legendMarks are the mark kinds the legend shows, in order.
var legendMarks = []struct{ kind, outcome, label string }{
	{"fault", "", "fault"}, {"heal", "", "heal"}, {"crash", "", "crash"}, {"action", "", "action"},
	{"checkpoint", "", "checkpoint"}, {"error", "", "error"},
	{"client", "ok", "client op ok"}, {"client", "unknown", "client op unknown"}, {"client", "failed", "client op failed"},
	{"service", "", "other (service, ...)"},
}

var unsafeClass = regexp.MustCompile(`[^a-z0-9-]+`)

// classOf is s made safe as part of a class name.
func classOf(s string) string {
	c := unsafeClass.ReplaceAllString(strings.ToLower(s), "-")
	if c == "" {
		return "none"
	}
	return c
}

// The drawing as the page template takes it: every position computed,
// every text still raw (the template escapes it).
type (
	page struct {
		Title, Failure, Replay, Summary string
		Width, Height                   float64
		PlotLeft, PlotRight             float64
		AxisY, LanesTop, LanesBottom    float64
		Ticks                           []tick
		Legend                          []legendItem
		Lanes                           []laneBox
		Guides                          []guide
		EndX                            float64
		Log                             string
		Events                          int
	}
	tick struct {
		X     float64
		Label string
	}
	legendItem struct {
		X, Y         float64
		Class, Label string
		Path         string // a mark's glyph; "" for a span's swatch
	}
	laneBox struct {
		Host, Label string
		Class       string
		Y, H        float64
		Tracks      []trackLabel
		Spans       []spanBox
		Marks       []markGlyph
	}
	trackLabel struct {
		Y     float64
		Label string
	}
	spanBox struct {
		Class, Host, Service string
		X, Y, W, H           float64
		Title                string
	}
	markGlyph struct {
		Class, Host string
		X, Y        float64
		Path, Title string
	}
	guide struct {
		X     float64
		Class string
	}
)

// layout places the model's lanes, spans and marks.
func layout(m model, events []sim.Event, opts Options) page {
	p := page{Title: opts.Title, Failure: opts.Failure, Replay: opts.Replay, Events: len(events)}
	if p.Title == "" {
		p.Title = "stratum simulation timeline"
	}
	dur := m.end.Sub(m.start).Seconds()
	plotW := math.Min(maxPlotW, math.Max(minPlotW, dur*pxPerSec))
	p.PlotLeft, p.PlotRight = labelW, labelW+plotW
	p.Width = p.PlotRight + rightPad
	p.AxisY, p.LanesTop = axisY, lanesTop
	scale := plotW / math.Max(dur, 0.001)
	x := func(t time.Time) float64 { return p.PlotLeft + t.Sub(m.start).Seconds()*scale }
	p.EndX = p.PlotRight
	p.Ticks = ticks(dur, scale, p.PlotLeft)
	p.Legend = legend()
	p.Summary = summary(m)
	p.Log = logText(events, m.start)

	// The tracks this drawing uses, in their order.
	used := map[track]bool{}
	for _, s := range m.spans {
		used[track{kind: s.kind, service: s.service}] = true
	}
	var tr []track
	for _, t := range tracks {
		if used[track{kind: t.kind, service: t.service}] {
			tr = append(tr, t)
		}
	}

	y := p.LanesTop
	lanes := append([]string{""}, m.hosts...)
	index := map[string]int{}
	for i, h := range lanes {
		l := laneBox{Host: h, Label: h, Class: "lane", Y: y}
		if h == "" {
			l.Label, l.Class = "cluster", "lane lane-cluster"
		}
		marksBottom := y + lanePad + markRows*markRowH
		l.H = lanePad + markRows*markRowH + lanePad
		if h != "" {
			for j, t := range tr {
				l.Tracks = append(l.Tracks, trackLabel{Y: marksBottom + float64(j)*(trackH+trackGap), Label: t.label})
			}
			l.H += float64(len(tr)) * (trackH + trackGap)
		}
		index[h] = i
		p.Lanes = append(p.Lanes, l)
		y += l.H
	}
	p.LanesBottom = y
	p.Height = y + 16

	for _, s := range m.spans {
		i, ok := index[s.host]
		if !ok {
			continue
		}
		l := &p.Lanes[i]
		j := -1
		for k, t := range tr {
			if t.kind == s.kind && t.service == s.service {
				j = k
			}
		}
		if j < 0 || j >= len(l.Tracks) {
			continue
		}
		x0, x1 := x(s.start), x(s.end)
		l.Spans = append(l.Spans, spanBox{
			Class: "span span-" + s.kind, Host: s.host, Service: s.service,
			X: x0, Y: l.Tracks[j].Y, W: math.Max(minSpanW, x1-x0), H: trackH,
			Title: spanTitle(s, m.start),
		})
	}

	// Marks: on their lane's rows, each on the first row where it does not
	// cover the one before it.
	last := make([][markRows]float64, len(lanes))
	for i := range last {
		for r := range last[i] {
			last[i][r] = math.Inf(-1)
		}
	}
	for _, mk := range m.marks {
		i := index[mk.host]
		mx := x(mk.at)
		row := 0
		for r := range markRows {
			if mx-last[i][r] >= markSpacer {
				row = r
				break
			}
			if last[i][r] < last[i][row] {
				row = r
			}
		}
		last[i][row] = mx
		path, ok := glyph[mk.kind]
		if !ok {
			path = otherGlyph
		}
		class := "mark mark-" + classOf(mk.kind)
		if mk.kind == "client" {
			class += " outcome-" + clientOutcome(mk.what)
		}
		l := &p.Lanes[i]
		l.Marks = append(l.Marks, markGlyph{
			Class: class, Host: mk.host,
			X: mx, Y: l.Y + lanePad + markRowH/2 + float64(row)*markRowH,
			Path:  path,
			Title: fmt.Sprintf("%s  %s  %s: %s", seconds(mk.at.Sub(m.start)), laneName(mk.host), mk.kind, mk.what),
		})
		if guided[mk.kind] {
			p.Guides = append(p.Guides, guide{X: mx, Class: "guide guide-" + mk.kind})
		}
	}
	return p
}

// clientOutcome reads a client operation's outcome from its text ("put
// k1=v3 ok", "get k1 -> v3", "cas k1 v2->v3 unknown", "vip-2 put k1 v3:
// outcome unknown (context deadline exceeded)", a history's "...: NOT
// linearizable"), its parenthesized asides left out: "unknown" (it may or
// may not have taken effect, or a check was inconclusive), "failed", or "ok".
func clientOutcome(what string) string {
	text := strings.ToLower(reAside.ReplaceAllString(what, ""))
	words := strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && r != '-' })
	for _, w := range words {
		switch w {
		case "unknown", "indeterminate", "inconclusive", "timeout":
			return "unknown"
		}
	}
	if strings.Contains(text, "not linearizable") {
		return "failed"
	}
	for _, w := range words {
		switch w {
		case "fail", "failed", "error", "refused":
			return "failed"
		}
	}
	return "ok"
}

// reAside matches a parenthesized aside.
var reAside = regexp.MustCompile(`\([^()]*\)`)

func laneName(host string) string {
	if host == "" {
		return "cluster"
	}
	return host
}

// spanTitle is a span's tooltip: host, state, when and for how long, why.
func spanTitle(s span, start time.Time) string {
	what := s.kind
	if s.kind == SpanDown {
		what = s.service + " down"
	}
	until := seconds(s.end.Sub(start))
	if s.toEnd {
		until += " (the end of the log)"
	}
	return fmt.Sprintf("%s %s from %s to %s (%s): %s", s.host, what, seconds(s.start.Sub(start)), until,
		s.end.Sub(s.start).Round(time.Millisecond), s.detail)
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + "s" }

// ticks are the time axis's labelled ticks: a round step at least minTickPx
// apart.
func ticks(dur, scale, left float64) []tick {
	step := 0.001
	for _, s := range []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600} {
		step = s
		if s*scale >= minTickPx {
			break
		}
	}
	var out []tick
	for i := 0; float64(i)*step <= dur+1e-9; i++ {
		t := float64(i) * step
		out = append(out, tick{X: left + t*scale, Label: strconv.FormatFloat(t, 'f', -1, 64) + "s"})
	}
	return out
}

// legendSpans are the span kinds the legend shows, in order.
var legendSpans = []struct{ kind, label string }{
	{SpanLeader, "etcd leader"}, {SpanVIP, "VIP holder"}, {SpanPartitioned, "partitioned"},
	{SpanCrashed, "crashed"}, {SpanDown, "service down (etcd, kube-apiserver)"},
}

// legend lays out the span swatches in one row and the mark glyphs in
// another; their classes are "swatch span-KIND" and "swatch mark-KIND", so
// that ".span" and ".mark" select what the log holds only.
func legend() []legendItem {
	var out []legendItem
	xx := labelW
	for _, t := range legendSpans {
		out = append(out, legendItem{X: xx, Y: legendTop + 8, Class: "swatch span-" + t.kind, Label: t.label})
		xx += 30 + 6.2*float64(len(t.label))
	}
	xx = labelW
	for _, k := range legendMarks {
		path, ok := glyph[k.kind]
		if !ok {
			path = otherGlyph
		}
		class := "swatch mark-" + k.kind
		if k.outcome != "" {
			class += " outcome-" + k.outcome
		}
		out = append(out, legendItem{X: xx, Y: legendTop + 34, Class: class, Label: k.label, Path: path})
		xx += 30 + 6.2*float64(len(k.label))
	}
	return out
}

func summary(m model) string {
	if m.events == 0 {
		return "The event log is empty: nothing to draw."
	}
	return fmt.Sprintf("%d events over %s on %d hosts, from %s. Hover over a span or a mark for its text.",
		m.events, seconds(m.end.Sub(m.start)), len(m.hosts), m.start.UTC().Format("2006-01-02 15:04:05.000 UTC"))
}

// logText is the whole log as text, one event a line, with the time since
// its first event (as sim.EventLog's String).
func logText(events []sim.Event, start time.Time) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%9s %-5s %-10s %s\n", seconds(e.Time.Sub(start)), laneName(e.Host), e.Kind, e.What)
	}
	return b.String()
}

var pageTemplate = template.Must(template.New("timeline").Funcs(template.FuncMap{
	"f":   func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"add": func(a, b float64) float64 { return a + b },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="generator" content="stratum sim timeline">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 20px; margin: 0 0 6px; }
code, pre { font: 12px/1.4 ui-monospace, monospace; }
.replay code { background: #f3f3f3; padding: 2px 4px; }
.summary { color: #555; margin: 4px 0 8px; }
svg { display: block; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
svg .lane-name { font-weight: bold; font-size: 13px; }
svg .track-name { fill: #777; font-size: 10px; }
svg .tick-label { fill: #555; }
.lane-bg { fill: #fafafa; stroke: #e4e4e4; }
.lane-bg-cluster { fill: #f2f5fa; }
.gridline { stroke: #ececec; }
.axis { stroke: #999; }
.guide { stroke-width: 1; stroke-dasharray: 2 3; opacity: .35; }
.guide-fault, .guide-crash { stroke: #d62728; }
.guide-heal { stroke: #2ca02c; }
.span-leader { fill: #e6a700; }
.span-vip { fill: #1f77b4; }
.span-partitioned { fill: #ff7f0e; opacity: .75; }
.span-crashed { fill: #b00020; }
.span-down { fill: #8c8c8c; }
.mark path, .swatch path { fill: #999; stroke: #555; stroke-width: .5; }
.mark-fault path { fill: #d62728; stroke: #7a0000; }
.mark-heal path { fill: #2ca02c; stroke: #145214; }
.mark-crash path { fill: none; stroke: #b00020; stroke-width: 2.2; }
.mark-action path { fill: #5b7bd5; stroke: #2c3f78; }
.mark-checkpoint path { fill: #7f3fbf; stroke: #4b1f78; }
.mark-error path { fill: #ff2d55; stroke: #8a0020; }
.mark-client path { fill: #17becf; stroke: #0b5f68; }
.mark-client.outcome-unknown path { fill: #ffbf00; stroke: #7a5c00; }
.mark-client.outcome-failed path { fill: #ff6f61; stroke: #8a0020; }
.mark:hover path, .span:hover { stroke: #000; stroke-width: 1.5; }
.end-failure { stroke: #d00; stroke-width: 2; }
.failure-label rect { fill: #d00; }
.failure-label text { fill: #fff; font-weight: bold; }
.failure { border: 2px solid #d00; background: #fff0f0; color: #700; padding: 8px 12px; margin: 10px 0; max-width: 1300px; }
.failure pre { white-space: pre-wrap; margin: 4px 0 0; color: #400; }
details pre { white-space: pre; overflow-x: auto; background: #f7f7f7; padding: 8px; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{if .Replay}}<p class="replay">replay: <code>{{.Replay}}</code></p>
{{end}}<p class="summary">{{.Summary}}</p>
<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{{f .Width}}" height="{{f .Height}}" viewBox="0 0 {{f .Width}} {{f .Height}}">
<g class="legend">
{{range .Legend}}{{if .Path}}<g class="{{.Class}}" transform="translate({{f .X}},{{f .Y}})"><path d="{{.Path}}"/></g><text x="{{f (add .X 9)}}" y="{{f (add .Y 4)}}">{{.Label}}</text>
{{else}}<rect class="{{.Class}}" x="{{f .X}}" y="{{f (add .Y -5)}}" width="16" height="9"/><text x="{{f (add .X 20)}}" y="{{f (add .Y 4)}}">{{.Label}}</text>
{{end}}{{end}}</g>
{{range .Lanes}}<rect class="lane-bg{{if not .Host}} lane-bg-cluster{{end}}" x="0" y="{{f .Y}}" width="{{f $.PlotRight}}" height="{{f .H}}"/>
{{end}}<g class="axis-group">
<line class="axis" x1="{{f .PlotLeft}}" y1="{{f .AxisY}}" x2="{{f .PlotRight}}" y2="{{f .AxisY}}"/>
{{range .Ticks}}<line class="gridline" x1="{{f .X}}" y1="{{f $.AxisY}}" x2="{{f .X}}" y2="{{f $.LanesBottom}}"/><text class="tick-label" x="{{f .X}}" y="{{f (add $.AxisY -4)}}" text-anchor="middle">{{.Label}}</text>
{{end}}</g>
<g class="guides">
{{range .Guides}}<line class="{{.Class}}" x1="{{f .X}}" y1="{{f $.LanesTop}}" x2="{{f .X}}" y2="{{f $.LanesBottom}}"/>
{{end}}</g>
{{range .Lanes}}<g class="{{.Class}}" data-host="{{.Host}}">
<text class="lane-name" x="8" y="{{f (add .Y 20)}}">{{.Label}}</text>
{{range .Tracks}}<text class="track-name" x="{{f (add $.PlotLeft -8)}}" y="{{f (add .Y 8)}}" text-anchor="end">{{.Label}}</text>
{{end}}{{range .Spans}}<rect class="{{.Class}}" data-host="{{.Host}}"{{if .Service}} data-service="{{.Service}}"{{end}} x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}"><title>{{.Title}}</title></rect>
{{end}}{{range .Marks}}<g class="{{.Class}}" data-host="{{.Host}}" transform="translate({{f .X}},{{f .Y}})"><title>{{.Title}}</title><path d="{{.Path}}"/></g>
{{end}}</g>
{{end}}{{if .Failure}}<g class="failure-mark"><title>{{.Failure}}</title>
<line class="end-failure" x1="{{f .EndX}}" y1="{{f .AxisY}}" x2="{{f .EndX}}" y2="{{f .LanesBottom}}"/>
<g class="failure-label"><rect x="{{f (add .EndX 4)}}" y="{{f .LanesTop}}" width="118" height="18" rx="3"/><text x="{{f (add .EndX 10)}}" y="{{f (add .LanesTop 13)}}">invariant violated</text></g>
</g>
{{end}}</svg>
{{if .Failure}}<div class="failure"><strong>Violated invariant</strong>
<pre>{{.Failure}}</pre></div>
{{end}}<details><summary>The event log ({{.Events}} events)</summary>
<pre>{{.Log}}</pre></details>
</body>
</html>
`))
