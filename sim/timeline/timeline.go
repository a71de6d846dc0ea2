// Package timeline draws a simulation's event log ([]sim.Event, as
// `stratum sim up --events` and (*sim.EventLog).MarshalJSON write it) as one
// self-contained HTML page with an inline SVG, so a failure can be seen: a
// lane per host and one for the cluster; spans for what holds over time (the
// etcd leader, the VIP holder, a crashed host, a partitioned one, a service
// down); marks for what happens at an instant (checkpoints, faults, actions,
// errors, client operations), each with its full text as a tooltip; the
// violated invariant in a red box at the end; and the command that replays
// the run. The page needs no network: no external script, style or font.
//
// The page's DOM is stable for tests and tools: each lane is
// <g class="lane" data-host="cp1"> (data-host="" for the cluster's), each
// span <rect class="span span-KIND" data-host=...> (KIND one of the Span
// constants; a down span also has data-service), each mark
// <g class="mark mark-KIND" data-host=...> (KIND the event's kind) holding
// a <title>, and the failure <div class="failure">.
package timeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/sim"
)

// Marker is in the head of every page Write renders, within its first
// MarkerWithin bytes: how `stratum sim timeline` tells a page it wrote (which
// it may replace) from any other file.
const Marker = `<meta name="generator" content="stratum sim timeline">`

// MarkerWithin bounds where a page holds Marker: a reader needs only this
// much of a file's start to recognise a page.
const MarkerWithin = 512

// Options are what a timeline says besides its events.
type Options struct {
	// Title heads the page; "" is "stratum simulation timeline".
	Title string
	// Failure is the invariant the run violated (a failing property's
	// message), shown in a red box at the end; "" when none.
	Failure string
	// Replay is the command that replays the run, shown as text; "" for
	// none.
	Replay string
}

// Write renders events (in the order recorded) as one HTML page to w. An
// empty log renders a page that says so.
func Write(w io.Writer, events []sim.Event, opts Options) error {
	page := layout(derive(events), events, opts)
	if err := pageTemplate.Execute(w, page); err != nil {
		return fmt.Errorf("render the timeline of %d events: %w", len(events), err)
	}
	return nil
}

// unsafeName matches what WriteFiles replaces in a base name.
var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// WriteFiles writes events to dir as <base>.events.json (the JSON array
// `stratum sim up --events` writes, which `stratum sim timeline` and the MCP
// sim_events tool read) and their timeline as <base>.timeline.html, each
// atomically (a temporary file renamed into place), creating dir if needed.
// It is what a failing scenario calls to leave its run behind for a person.
// Characters of base other than letters, digits, '.', '_' and '-' (a
// subtest's '/', say) become '_'. It returns the paths written; on error
// neither path holds a partial file.
func WriteFiles(dir, base string, events []sim.Event, opts Options) (jsonPath, htmlPath string, err error) {
	base = unsafeName.ReplaceAllString(base, "_")
	if base == "" || base == "." || base == ".." {
		return "", "", fmt.Errorf("write the timeline files: base name %q names no file; nothing was written", base)
	}
	if events == nil {
		events = []sim.Event{}
	}
	data, err := json.MarshalIndent(events, "", "  ")
	if err != nil {
		return "", "", fmt.Errorf("encode the event log: %w; nothing was written", err)
	}
	var page bytes.Buffer
	if err := Write(&page, events, opts); err != nil {
		return "", "", fmt.Errorf("%w; nothing was written", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("write the timeline files: %w; nothing was written", err)
	}
	// host.Dir's writes are atomic and durable: a temporary file in the
	// same directory, fsync'd, renamed into place, the directory fsync'd.
	out := &host.Dir{Root: dir}
	jsonPath = filepath.Join(dir, base+".events.json")
	htmlPath = filepath.Join(dir, base+".timeline.html")
	if err := out.WriteFile("/"+base+".events.json", append(data, '\n'), 0o644); err != nil {
		return "", "", fmt.Errorf("write the event log %s: %w; nothing was written", jsonPath, err)
	}
	if err := out.WriteFile("/"+base+".timeline.html", page.Bytes(), 0o644); err != nil {
		return jsonPath, "", fmt.Errorf("write the timeline: %w (the event log %s was written)", err, jsonPath)
	}
	return jsonPath, htmlPath, nil
}
