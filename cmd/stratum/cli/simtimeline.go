package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/sim"
	"stratum.dev/stratum/sim/timeline"
)

// simTimelineFlags are `stratum sim timeline`'s flags.
type simTimelineFlags struct {
	output, failure, title, replay string
}

func (a *app) simTimelineCmd() *cobra.Command {
	var f simTimelineFlags
	cmd := &cobra.Command{
		Use:   "timeline EVENTS.json",
		Short: "Draw a simulation's event log as a timeline (one self-contained HTML file)",
		Long: `Draw the event log of a simulation (the JSON array "stratum sim up --events FILE"
writes, or a failing scenario's <test>.events.json) as one self-contained HTML page with
an inline SVG: no network, no external script or style.

The page has a lane per host (cp1, cp2, ... in that order) and one for the cluster.
Spans show what held over time: the etcd leader (as most members reporting name it; an
etcd member run as a separate process reports none), the VIP holder, a crashed host
(until it reboots, reaches a checkpoint or starts a service), a partitioned or isolated
host (until the network heals), and etcd or kube-apiserver down (stopped, crashed or
killed until it starts again). Marks show what happened at an instant: faults, heals,
crashes, actions, checkpoints, errors and client operations (green: ok, amber: unknown
outcome, red: failed); hovering over a span or a mark shows its full text. --failure
puts the invariant the run violated in a red box at the end; --replay shows the command
that replays it. The whole log is included as text at the bottom.

The page is written to -o FILE (default: the input's name with .html for .json, beside
it), atomically: an error leaves no file and no half-written one. "-o -" writes it to
stdout. The input is read only.`,
		Example: `  # Save a run's event log, then draw it beside the log (/tmp/run.html)
  stratum sim up --control-planes 3 --events /tmp/run.json
  stratum sim timeline /tmp/run.json

  # Draw a failing scenario's log with the invariant it broke
  stratum sim timeline /tmp/TestSplitBrain.events.json -o /tmp/splitbrain.html \
    --title "TestSplitBrain check 3" --failure "split leadership reported healthy"

  # Write the page to stdout
  stratum sim timeline /tmp/run.json -o - > /tmp/run.html`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error { return a.simTimeline(args[0], f) },
	}
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "write the page to `FILE` (\"-\": stdout; default: EVENTS with .html for .json, beside it)")
	cmd.Flags().StringVar(&f.failure, "failure", "", "the violated invariant's `TEXT`, shown in a red box at the end")
	cmd.Flags().StringVar(&f.title, "title", "", "the page's title `TEXT` (default \"stratum simulation timeline\")")
	cmd.Flags().StringVar(&f.replay, "replay", "", "the `TEXT` of the command that replays the run, shown under the title")
	return cmd
}

// timelinePath is the default page for an event log: its name with .html for
// .json (or .html added), beside it.
func timelinePath(events string) string {
	return strings.TrimSuffix(events, filepath.Ext(events)) + ".html"
}

// simTimeline is `stratum sim timeline`.
func (a *app) simTimeline(in string, f simTimelineFlags) error {
	out := f.output
	if out == "" {
		out = timelinePath(in)
	}
	// Everywhere else -o is the report's format: a page written to a file
	// named json would be a surprise.
	if slices.Contains([]string{"json", "yaml", "text", "table"}, out) {
		return usagef("-o %s: here -o is the FILE the page is written to (the page is HTML, in no other format): give a path such as ./%s.html, or - for stdout", out, out)
	}
	// Refusals first: nothing is written until the log is read and the page
	// rendered.
	evs, err := readEvents(in)
	if err != nil {
		return refusedf("read the event log: %w; nothing was written", err)
	}
	if len(evs) == 0 {
		return refusedf("the event log %s holds no events: nothing to draw; nothing was written", in)
	}
	if out != "-" {
		if sameFile(in, out) {
			return refusedf("-o %s is the event log itself: name another file; nothing was written", out)
		}
		if err := checkWritableFile(out); err != nil {
			return refusedf("-o %s: %w: pass the path of a file in a directory that exists and is writable, or - for stdout; nothing was written", out, err)
		}
		if err := checkReplaceable(out, "a timeline page `stratum sim timeline` wrote", isTimelinePage); err != nil {
			return refusedf("-o %s: %w; nothing was written", out, err)
		}
	}
	var page bytes.Buffer
	if err := timeline.Write(&page, evs, timeline.Options{Title: f.title, Failure: f.failure, Replay: f.replay}); err != nil {
		return fmt.Errorf("%w; nothing was written", err)
	}
	if out == "-" {
		if _, err := a.stdout.Write(page.Bytes()); err != nil {
			return fmt.Errorf("write the timeline to stdout: %w", err)
		}
		return nil
	}
	if err := writeFileAtomic(out, page.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the timeline to %s: %w; nothing was written", out, err)
	}
	fmt.Fprintf(a.stdout, "timeline of %d events on %d hosts written to %s\n", len(evs), countHosts(evs), out)
	return nil
}

// isTimelinePage reports whether r holds a page `stratum sim timeline` (or
// timeline.WriteFiles) wrote: timeline.Marker in its head.
func isTimelinePage(r io.Reader) bool {
	head := make([]byte, timeline.MarkerWithin)
	n, _ := io.ReadFull(r, head)
	return bytes.Contains(head[:n], []byte(timeline.Marker))
}

// sameFile reports whether paths a and b name one file: the same path, or
// the same existing file.
func sameFile(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	if err1 == nil && err2 == nil && aa == bb {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// countHosts is how many distinct hosts the events name.
func countHosts(evs []sim.Event) int {
	seen := map[string]bool{}
	for _, e := range evs {
		if e.Host != "" {
			seen[e.Host] = true
		}
	}
	return len(seen)
}
